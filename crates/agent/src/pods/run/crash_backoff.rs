//! The kubelet's crash-loop back-off (its `crashLoopBackOff`, asked by
//! `doBackOff` with the exited container's finish time): a container that
//! exited and is to be restarted is restarted at once the first time;
//! after that it waits, from its exit, the back-off its last restart set:
//! 10 s after the first restart, twice that after each next one, up to
//! 5 min (`MaxContainerBackOff`). A container that exits more than
//! 10 minutes after its last restart starts over: restarted at once, the
//! back-off back to 10 s.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Container;

/// The first wait before a restart.
pub(crate) const CRASH_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The longest wait before a restart.
pub(crate) const CRASH_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container that exits this long after its last restart starts over at
/// the first wait (the kubelet's `HasExpiredFunc`).
pub(crate) const CRASH_BACKOFF_RESET: Duration = Duration::from_secs(600);

/// The key of `container`'s back-off: its name, image and resources, as
/// the kubelet's `GetBackoffKey`, so that a container whose image or
/// resources changed starts without the back-off of the one it replaces.
pub(crate) fn backoff_key(container: &Container) -> String {
    let resources = serde_json::to_string(&container.resources).unwrap_or_default();
    format!(
        "{}/{}/{resources}",
        container.name,
        container.image.as_deref().unwrap_or_default()
    )
}

/// One container's back-off.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The wait after its next exit.
    wait: Duration,
    /// When it was last restarted.
    restarted_at: SystemTime,
}

impl Entry {
    /// Whether an exit at `finished_at` starts over.
    fn expired_by(&self, finished_at: SystemTime) -> bool {
        finished_at
            .duration_since(self.restarted_at)
            .is_ok_and(|since| since > CRASH_BACKOFF_RESET)
    }
}

/// The back-off of each container of one pod, by [`backoff_key`].
#[derive(Debug, Default)]
pub(crate) struct CrashBackoff {
    entries: HashMap<String, Entry>,
}

impl CrashBackoff {
    /// When the container of key `name`, which exited at `finished_at`, may be
    /// restarted: `None` when now (`now`), else the time and the wait it
    /// serves (the kubelet's `IsInBackOffSince`).
    pub(crate) fn restart_at(
        &self,
        name: &str,
        finished_at: SystemTime,
        now: SystemTime,
    ) -> Option<(SystemTime, Duration)> {
        let entry = self.entries.get(name)?;
        if entry.expired_by(finished_at) {
            return None;
        }
        let at = finished_at + entry.wait;
        (at > now).then_some((at, entry.wait))
    }

    /// The container of key `name`, which exited at `finished_at`, is restarted at
    /// `now`: its next exit waits twice as long, or the first wait after
    /// its first restart or one that starts over (the kubelet's `Next`).
    pub(crate) fn restarted(&mut self, name: &str, finished_at: SystemTime, now: SystemTime) {
        let wait = match self.entries.get(name) {
            Some(entry) if !entry.expired_by(finished_at) => {
                (entry.wait * 2).min(CRASH_BACKOFF_MAX)
            }
            _ => CRASH_BACKOFF_INITIAL,
        };
        self.entries.insert(
            name.to_string(),
            Entry {
                wait,
                restarted_at: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    #[test]
    fn the_first_restart_is_at_once_then_each_waits_twice_as_long_from_the_exit_up_to_five_minutes()
    {
        let mut backoff = CrashBackoff::default();
        assert_eq!(backoff.restart_at("c", at(1), at(1)), None);
        backoff.restarted("c", at(1), at(1));
        // Exited one second later: it waits 10 s from its exit.
        assert_eq!(
            backoff.restart_at("c", at(2), at(2)),
            Some((at(12), Duration::from_secs(10)))
        );
        assert_eq!(backoff.restart_at("c", at(2), at(12)), None);
        let mut now = 12;
        let mut waits = Vec::new();
        for _ in 0..7 {
            backoff.restarted("c", at(now - 10), at(now));
            let (due, wait) = backoff.restart_at("c", at(now + 1), at(now + 1)).unwrap();
            waits.push(wait.as_secs());
            now = due.duration_since(at(0)).unwrap().as_secs();
        }
        assert_eq!(waits, [20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn a_container_that_runs_a_while_still_waits_its_back_off_after_each_exit() {
        // Crashes 60 s after each start: the kubelet waits 10, 20, 40, 80,
        // 160, 300 s after each exit, however long the run was.
        let mut backoff = CrashBackoff::default();
        let mut now = 0;
        backoff.restarted("c", at(now), at(now));
        let mut waits = Vec::new();
        for _ in 0..6 {
            let exit = now + 60;
            let (due, wait) = backoff.restart_at("c", at(exit), at(exit)).unwrap();
            waits.push(wait.as_secs());
            now = due.duration_since(at(0)).unwrap().as_secs();
            backoff.restarted("c", at(exit), at(now));
        }
        assert_eq!(waits, [10, 20, 40, 80, 160, 300]);
    }

    #[test]
    fn an_exit_ten_minutes_after_the_last_restart_starts_over() {
        let mut backoff = CrashBackoff::default();
        backoff.restarted("c", at(0), at(0));
        backoff.restarted("c", at(5), at(15));
        assert_eq!(
            backoff.restart_at("c", at(16), at(16)).map(|(_, w)| w),
            Some(Duration::from_secs(20))
        );
        // Ran 601 s since its last restart: restarted at once, then 10 s.
        assert_eq!(backoff.restart_at("c", at(616), at(616)), None);
        backoff.restarted("c", at(616), at(616));
        assert_eq!(
            backoff.restart_at("c", at(617), at(617)).map(|(_, w)| w),
            Some(Duration::from_secs(10))
        );
        assert_eq!(backoff.restart_at("other", at(617), at(617)), None);
    }
}

//! The kubelet's crash-loop back-off: a container that exited and is to be
//! restarted is restarted at once the first time; each restart then waits
//! twice as long as the one before (10 s, 20 s, ... up to 5 min) when the
//! container ended within that long of its last restart, and the wait goes
//! back to 10 s once the container ran for 10 minutes since its last
//! restart (the kubelet's `MaxContainerBackOff`, its initial 10 s and its
//! reset after a container ran that long).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The first wait before a restart.
pub(crate) const CRASH_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The longest wait before a restart.
pub(crate) const CRASH_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container whose last restart is this long ago starts over at the
/// first wait.
pub(crate) const CRASH_BACKOFF_RESET: Duration = Duration::from_secs(600);

/// One container's back-off.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The wait the next restart may owe.
    wait: Duration,
    /// When it was last restarted.
    restarted_at: SystemTime,
}

/// The back-off of each container of one pod, by name.
#[derive(Debug, Default)]
pub(crate) struct CrashBackoff {
    entries: HashMap<String, Entry>,
}

impl CrashBackoff {
    /// When container `name`, which ended at `finished_at`, may be
    /// restarted: `None` when now (`now`), else the time and the wait it
    /// serves.
    pub(crate) fn restart_at(
        &self,
        name: &str,
        finished_at: SystemTime,
        now: SystemTime,
    ) -> Option<(SystemTime, Duration)> {
        let entry = self.entries.get(name)?;
        let ran = finished_at
            .duration_since(entry.restarted_at)
            .unwrap_or_default();
        if ran >= entry.wait {
            return None;
        }
        let at = entry.restarted_at + entry.wait;
        (at > now).then_some((at, entry.wait))
    }

    /// Container `name` is restarted at `now`: the next restart owes twice
    /// the wait (the first wait, after the first restart or a long run).
    pub(crate) fn restarted(&mut self, name: &str, now: SystemTime) {
        let wait = match self.entries.get(name) {
            Some(entry)
                if now.duration_since(entry.restarted_at).unwrap_or_default()
                    < CRASH_BACKOFF_RESET =>
            {
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
    fn the_first_restart_is_at_once_then_each_waits_twice_as_long_up_to_five_minutes() {
        let mut backoff = CrashBackoff::default();
        assert_eq!(backoff.restart_at("c", at(1), at(1)), None);
        backoff.restarted("c", at(1));
        // Crashed one second later: it waits out 10 s from its restart.
        assert_eq!(
            backoff.restart_at("c", at(2), at(2)),
            Some((at(11), Duration::from_secs(10)))
        );
        assert_eq!(backoff.restart_at("c", at(2), at(11)), None);
        let mut now = 11;
        let mut waits = Vec::new();
        for _ in 0..7 {
            backoff.restarted("c", at(now));
            let (due, wait) = backoff.restart_at("c", at(now + 1), at(now + 1)).unwrap();
            waits.push(wait.as_secs());
            now = due.duration_since(at(0)).unwrap().as_secs();
        }
        assert_eq!(waits, [20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn a_container_that_ran_longer_than_its_wait_restarts_at_once_and_a_long_run_resets_the_wait() {
        let mut backoff = CrashBackoff::default();
        backoff.restarted("c", at(0));
        backoff.restarted("c", at(1));
        // 20 s owed; it ran 30 s: restarted at once.
        assert_eq!(backoff.restart_at("c", at(31), at(31)), None);
        backoff.restarted("c", at(31));
        assert_eq!(
            backoff.restart_at("c", at(32), at(32)).map(|(_, w)| w),
            Some(Duration::from_secs(40))
        );
        // Restarted again 10 minutes after the last restart: back to 10 s.
        backoff.restarted("c", at(31 + 601));
        assert_eq!(
            backoff.restart_at("c", at(633), at(633)).map(|(_, w)| w),
            Some(Duration::from_secs(10))
        );
        assert_eq!(backoff.restart_at("other", at(633), at(633)), None);
    }
}

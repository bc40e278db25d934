//! The kubelet's image pull back-off (its image manager's `backOff`, keyed
//! by pod and image): after a failed pull, the image is not pulled again
//! for the pod within 10 s, then 20 s after the next failure, up to
//! 5 min (`MaxImageBackOff`); a pull tried inside it is `ImagePullBackOff`
//! with the last pull's error. An image whose last failure is more than
//! twice the longest wait ago starts over.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The first wait after a failed pull.
pub(crate) const IMAGE_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The longest wait.
pub(crate) const IMAGE_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// One image's back-off.
#[derive(Debug, Clone)]
struct Entry {
    wait: Duration,
    failed_at: Instant,
    /// The last pull's error, `ErrImagePull: <message>`.
    error: String,
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.failed_at) > IMAGE_BACKOFF_MAX * 2
    }
}

/// The pull back-off of one pod's images.
#[derive(Debug, Default)]
pub(crate) struct ImagePulls {
    entries: HashMap<String, Entry>,
}

impl ImagePulls {
    /// The last pull's error of `image` while it may not be pulled again
    /// (`now`); none when it may.
    pub(crate) fn in_backoff(&self, image: &str, now: Instant) -> Option<&str> {
        let entry = self.entries.get(image)?;
        (!entry.expired(now) && now.duration_since(entry.failed_at) < entry.wait)
            .then_some(entry.error.as_str())
    }

    /// Pulling `image` failed at `now` with `error`: the next pull waits
    /// twice as long as the last (the first wait for a first failure).
    pub(crate) fn failed(&mut self, image: &str, now: Instant, error: String) {
        let wait = match self.entries.get(image) {
            Some(entry) if !entry.expired(now) => (entry.wait * 2).min(IMAGE_BACKOFF_MAX),
            _ => IMAGE_BACKOFF_INITIAL,
        };
        self.entries.insert(
            image.to_string(),
            Entry {
                wait,
                failed_at: now,
                error,
            },
        );
    }

    /// A pull succeeded at `now`: the back-offs long over are forgotten.
    pub(crate) fn pulled(&mut self, now: Instant) {
        self.entries.retain(|_, entry| !entry.expired(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_doubles_the_wait_up_to_five_minutes() {
        let start = Instant::now();
        let after = |s: u64| start + Duration::from_secs(s);
        let mut pulls = ImagePulls::default();
        assert_eq!(pulls.in_backoff("x", start), None);
        pulls.failed("x", start, "ErrImagePull: no such host".into());
        assert_eq!(
            pulls.in_backoff("x", after(9)),
            Some("ErrImagePull: no such host")
        );
        assert_eq!(pulls.in_backoff("x", after(10)), None);
        assert_eq!(pulls.in_backoff("other", after(1)), None);
        let mut at = 10;
        let mut waits = Vec::new();
        for _ in 0..6 {
            pulls.failed("x", after(at), "ErrImagePull: again".into());
            let free = (at..).find(|s| pulls.in_backoff("x", after(*s)).is_none());
            waits.push(free.unwrap() - at);
            at = free.unwrap();
        }
        assert_eq!(waits, [20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_failure_long_ago_starts_over() {
        let start = Instant::now();
        let mut pulls = ImagePulls::default();
        pulls.failed("x", start, "e".into());
        pulls.failed("x", start + Duration::from_secs(10), "e".into());
        let later = start + Duration::from_secs(10 + 601);
        assert_eq!(pulls.in_backoff("x", later), None);
        pulls.failed("x", later, "e".into());
        assert!(
            pulls
                .in_backoff("x", later + Duration::from_secs(9))
                .is_some()
        );
        assert!(
            pulls
                .in_backoff("x", later + Duration::from_secs(10))
                .is_none()
        );
        pulls.pulled(later + Duration::from_secs(700));
        assert!(pulls.entries.is_empty());
    }
}

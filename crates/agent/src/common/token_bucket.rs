//! A token bucket: `qps` tokens a second, up to `burst` held. The pod
//! resources server refuses a call that finds none, as the kubelet's
//! interceptor does; the pods owner's API requests wait for theirs, as
//! client-go's rate limiter makes the kubelet's requests wait.
//!
//! Kept as the time the bucket will be full again (the generic cell rate
//! algorithm), in whole nanoseconds: exact, with no drift from fractions.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    /// The time one token takes to come back.
    interval: Duration,
    /// How far ahead of now the bucket may be drawn: `burst` tokens.
    window: Duration,
    /// When every token taken so far will have come back.
    full_at: Mutex<Option<Instant>>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens, `qps` coming back a second (a rate
    /// or burst of 0 counts as 1).
    pub(crate) fn new(qps: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / qps.max(1);
        Self {
            interval,
            window: interval * burst.max(1),
            full_at: Mutex::new(None),
        }
    }

    /// Takes a token at `now`, if there is one.
    pub(crate) fn allow_at(&self, now: Instant) -> bool {
        let mut full_at = self.full_at.lock().unwrap_or_else(|p| p.into_inner());
        let next = full_at.map_or(now, |t| t.max(now)) + self.interval;
        if next.duration_since(now) > self.window {
            return false;
        }
        *full_at = Some(next);
        true
    }

    #[cfg(any(test, feature = "kube"))]
    /// Takes the next token at `now`, whether or not it is there yet;
    /// returns how long until it is.
    pub(crate) fn reserve_at(&self, now: Instant) -> Duration {
        let mut full_at = self.full_at.lock().unwrap_or_else(|p| p.into_inner());
        let next = full_at.map_or(now, |t| t.max(now)) + self.interval;
        *full_at = Some(next);
        next.duration_since(now).saturating_sub(self.window)
    }

    /// Waits for the next token.
    #[cfg(feature = "kube")]
    pub(crate) async fn acquire(&self) {
        let wait = self.reserve_at(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_passes_then_calls_pass_at_the_rate() {
        let limiter = TokenBucket::new(100, 10);
        let start = Instant::now();
        assert!((0..10).all(|_| limiter.allow_at(start)), "the burst");
        assert!(!limiter.allow_at(start), "the eleventh at once");
        assert!(!limiter.allow_at(start + Duration::from_millis(9)));
        assert!(
            limiter.allow_at(start + Duration::from_millis(10)),
            "one token per 10 ms"
        );
        assert!(!limiter.allow_at(start + Duration::from_millis(10)));
        // A long pause refills the bucket to the burst, no more.
        let later = start + Duration::from_secs(60);
        assert!((0..10).all(|_| limiter.allow_at(later)));
        assert!(!limiter.allow_at(later));
    }

    #[test]
    fn reserved_tokens_past_the_burst_wait_their_turn_at_the_rate() {
        // The kubelet's API client: 50 a second, bursts of 100.
        let limiter = TokenBucket::new(50, 100);
        let now = Instant::now();
        for i in 0..100 {
            assert_eq!(
                limiter.reserve_at(now),
                Duration::ZERO,
                "request {i} of the burst"
            );
        }
        assert_eq!(limiter.reserve_at(now), Duration::from_millis(20));
        assert_eq!(limiter.reserve_at(now), Duration::from_millis(40));
        // A second later 50 tokens came back: the two queued are paid for
        // and 48 go at once.
        let later = now + Duration::from_secs(1);
        for i in 0..48 {
            assert_eq!(
                limiter.reserve_at(later),
                Duration::ZERO,
                "request {i} a second later"
            );
        }
        assert_eq!(limiter.reserve_at(later), Duration::from_millis(20));
    }
}

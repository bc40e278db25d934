//! The token bucket every call takes a token from: `qps` tokens a second up
//! to `burst` held; a call that finds none is refused at once with
//! `ResourceExhausted: rejected by rate limit`, as by the kubelet.
//!
//! Kept as the time the bucket will be full again (the generic cell rate
//! algorithm), in whole nanoseconds: exact, with no drift from fractions.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use nodeplugins_api::constants::pod_resources::RATE_LIMITED;
use tonic::Status;

use super::config::RateLimit;

/// A token bucket.
#[derive(Debug)]
pub(crate) struct Limiter {
    /// The time one token takes to come back.
    interval: Duration,
    /// How far ahead of now the bucket may be drawn: `burst` tokens.
    window: Duration,
    /// When every token taken so far will have come back.
    full_at: Mutex<Option<Instant>>,
}

impl Limiter {
    /// A full bucket (a rate of 0 counts as 1 a second).
    pub(crate) fn new(limit: RateLimit) -> Self {
        let interval = Duration::from_secs(1) / limit.qps.max(1);
        Self {
            interval,
            window: interval * limit.burst.max(1),
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

    /// Takes a token now, or refuses the call.
    pub(crate) fn check(&self) -> Result<(), Status> {
        if self.allow_at(Instant::now()) {
            Ok(())
        } else {
            Err(Status::resource_exhausted(RATE_LIMITED))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_passes_then_calls_pass_at_the_rate() {
        let limiter = Limiter::new(RateLimit {
            qps: 100,
            burst: 10,
        });
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
}

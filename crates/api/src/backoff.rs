//! The one exponential backoff every retry loop of the agent and the SDK
//! uses: `initial`, doubled per further failure, capped at `max`, and, with
//! jitter, lengthened by a random fraction of itself (as client-go's
//! `wait.Backoff` does) so that the nodes of a cluster retrying after one
//! outage do not retry in step.

use std::time::Duration;

/// An exponential backoff schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub initial: Duration,
    /// The longest delay, before jitter.
    pub max: Duration,
    /// Up to this fraction of each delay is added at random (0: none).
    pub jitter: f64,
}

impl Backoff {
    /// `initial` doubling to `max`, without jitter.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            jitter: 0.0,
        }
    }

    /// The same schedule with up to `fraction` of each delay added at
    /// random.
    pub const fn with_jitter(mut self, fraction: f64) -> Self {
        self.jitter = fraction;
        self
    }

    /// The delay after `failures` consecutive failures (1-based), before
    /// jitter.
    pub fn base_delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1u32 << doublings)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// The delay after `failures` consecutive failures (1-based), with
    /// jitter: between the base delay and `1 + jitter` times it.
    pub fn delay(&self, failures: u32) -> Duration {
        let base = self.base_delay(failures);
        if self.jitter <= 0.0 {
            return base;
        }
        base.mul_f64(1.0 + self.jitter * rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_doubles_and_caps() {
        let backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(122));
        let got: Vec<u64> = (1..=12)
            .map(|n| backoff.delay(n).as_millis() as u64)
            .collect();
        assert_eq!(
            got,
            [
                500, 1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 122_000, 122_000, 122_000,
                122_000
            ]
        );
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(122));
    }

    #[test]
    fn jitter_spreads_each_delay_above_its_base() {
        let backoff =
            Backoff::new(Duration::from_secs(1), Duration::from_secs(60)).with_jitter(0.5);
        let delays: Vec<Duration> = (0..200).map(|_| backoff.delay(3)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= Duration::from_secs(4) && *d <= Duration::from_secs(6))
        );
        let distinct: std::collections::BTreeSet<Duration> = delays.into_iter().collect();
        assert!(distinct.len() > 100, "spread, not in step");
    }
}

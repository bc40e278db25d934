//! Per-socket exponential backoff: 500 ms doubling to 2 min 2 s by default.

use std::time::Duration;

use tokio::time::Instant;

use super::state::Generation;

/// The retry schedule of one socket path.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    /// The plugin instance that failed; a re-created socket starts afresh.
    pub(crate) generation: Generation,
    pub(crate) failures: u32,
    pub(crate) delay: Duration,
    pub(crate) retry_at: Instant,
    pub(crate) last_error: String,
}

/// The delay after `failures` consecutive failures (1-based).
pub(crate) fn delay_after(failures: u32, initial: Duration, max: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    initial
        .checked_mul(1u32 << doublings)
        .map_or(max, |d| d.min(max))
}

impl Backoff {
    /// Records a failure of `generation` at `now`, continuing the schedule of
    /// `previous` only if it belongs to the same plugin instance.
    pub(crate) fn after_failure(
        previous: Option<&Backoff>,
        generation: Generation,
        error: String,
        now: Instant,
        initial: Duration,
        max: Duration,
    ) -> Backoff {
        let failures = match previous {
            Some(p) if p.generation == generation => p.failures + 1,
            _ => 1,
        };
        let delay = delay_after(failures, initial, max);
        Backoff {
            generation,
            failures,
            delay,
            retry_at: now + delay,
            last_error: error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_doubles_from_half_a_second_and_caps_at_two_minutes_two_seconds() {
        let initial = Duration::from_millis(500);
        let max = Duration::from_secs(122);
        let got: Vec<u64> = (1..=12)
            .map(|n| delay_after(n, initial, max).as_millis() as u64)
            .collect();
        assert_eq!(
            got,
            [
                500, 1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 122_000, 122_000, 122_000,
                122_000
            ]
        );
        assert_eq!(delay_after(u32::MAX, initial, max), max);
    }
}

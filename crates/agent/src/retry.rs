//! Exponential retry delays, shared by every retry loop of the agent:
//! registration backoff, DRA reconnects and DRA cleanup retries.

use std::time::Duration;

/// The delay after `failures` consecutive failures (1-based): `initial`,
/// doubled per further failure, capped at `max`.
pub(crate) fn delay_after(failures: u32, initial: Duration, max: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    initial
        .checked_mul(1u32 << doublings)
        .map_or(max, |d| d.min(max))
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

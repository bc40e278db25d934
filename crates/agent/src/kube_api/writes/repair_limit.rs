//! How often drift on one object is repaired. When the server is seen to
//! differ from what the agent wrote (another writer, a lost write), the
//! agent writes again; a writer that keeps undoing it would otherwise draw
//! a write from every node for every one of its own. A few repairs go out
//! at once, then one per [`RepairLimit::EVERY`] (the kubelet's node status
//! update period: what a kubelet fighting the same writer would send).

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket of repairs for one object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RepairLimit {
    /// Repairs that may go at once; below zero, repairs already promised
    /// a later time.
    tokens: f64,
    updated: Instant,
}

impl RepairLimit {
    /// Repairs that go out at once after a quiet while.
    pub(crate) const BURST: f64 = 5.0;
    /// One more repair may go per this long.
    pub(crate) const EVERY: Duration = Duration::from_secs(10);

    /// A full bucket.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            tokens: Self::BURST,
            updated: now,
        }
    }

    /// Takes one repair: how long it waits (zero while the burst lasts).
    pub(crate) fn take(&mut self, now: Instant) -> Duration {
        let refill =
            now.saturating_duration_since(self.updated).as_secs_f64() / Self::EVERY.as_secs_f64();
        self.tokens = (self.tokens + refill).min(Self::BURST) - 1.0;
        self.updated = now;
        match self.tokens {
            left if left >= 0.0 => Duration::ZERO,
            owed => Self::EVERY.mul_f64(-owed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_then_one_repair_per_period() {
        let start = Instant::now();
        let mut limit = RepairLimit::new(start);
        for _ in 0..5 {
            assert_eq!(limit.take(start), Duration::ZERO);
        }
        assert_eq!(limit.take(start), RepairLimit::EVERY);
        // Asked again when that one went: the next waits a period more.
        let then = start + RepairLimit::EVERY;
        assert_eq!(limit.take(then), RepairLimit::EVERY);
        // A quiet while fills the bucket again, no fuller than the burst.
        let later = then + RepairLimit::EVERY * 100;
        for _ in 0..5 {
            assert_eq!(limit.take(later), Duration::ZERO);
        }
        assert!(limit.take(later) > Duration::ZERO);
    }
}

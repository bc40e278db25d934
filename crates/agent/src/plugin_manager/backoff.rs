//! Per-socket exponential backoff: 500 ms doubling to 2 min 2 s by default.

use std::time::Duration;

use tokio::time::Instant;

use super::state::Generation;
use crate::retry::delay_after;

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

//! The retry record of one registration socket: its failures and when it
//! is tried again, on the shared backoff (500 ms doubling to 2 min 2 s by
//! default).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attempt_error::AttemptError;
use super::state::Generation;
use nodeplugins_api::backoff::Backoff;

/// The retry schedule of one socket path.
#[derive(Debug, Clone)]
pub(crate) struct SocketRetry {
    /// The plugin instance that failed; a re-created socket starts afresh.
    pub(crate) generation: Generation,
    pub(crate) failures: u32,
    pub(crate) delay: Duration,
    pub(crate) retry_at: Instant,
    pub(crate) last_error: Arc<AttemptError>,
}

impl SocketRetry {
    /// Records a failure of `generation` at `now`, continuing the schedule of
    /// `previous` only if it belongs to the same plugin instance.
    pub(crate) fn after_failure(
        previous: Option<&SocketRetry>,
        generation: Generation,
        error: Arc<AttemptError>,
        now: Instant,
        initial: Duration,
        max: Duration,
    ) -> SocketRetry {
        let failures = match previous {
            Some(p) if p.generation == generation => p.failures + 1,
            _ => 1,
        };
        let delay = Backoff::new(initial, max).delay(failures);
        SocketRetry {
            generation,
            failures,
            delay,
            retry_at: now + delay,
            last_error: error,
        }
    }
}

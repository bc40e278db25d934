//! The retry record of one registration socket: the plugin instance it is
//! about, and its failures on the shared backoff (500 ms doubling to 2 min
//! 2 s by default).

use std::sync::Arc;

use tokio::time::Instant;

use super::attempt_error::AttemptError;
use super::state::Generation;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};

/// The retry schedule of one socket path.
#[derive(Debug, Clone)]
pub(crate) struct SocketRetry {
    /// The plugin instance that failed; a re-created socket starts afresh.
    pub(crate) generation: Generation,
    pub(crate) retry: Retry<Arc<AttemptError>>,
}

impl SocketRetry {
    /// Records a failure of `generation` at `now`, continuing the schedule of
    /// `previous` only if it belongs to the same plugin instance; says
    /// whether the error is new.
    pub(crate) fn after_failure(
        previous: Option<SocketRetry>,
        generation: Generation,
        error: Arc<AttemptError>,
        now: Instant,
        backoff: &Backoff,
    ) -> (SocketRetry, Said) {
        let mut retry = match previous {
            Some(p) if p.generation == generation => p.retry,
            _ => Retry::default(),
        };
        let said = retry.failed(error, backoff, now);
        (SocketRetry { generation, retry }, said)
    }

    /// When the next attempt is due.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry.due_at()
    }
}

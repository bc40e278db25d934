//! What happens when a DRA driver stays unusable: the hook an embedder
//! implements to withdraw what the driver advertised (in a cluster: delete
//! the node's ResourceSlices of that driver), the retry schedule, and the
//! start-up call.

use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Classify, Retry};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The default grace period between the last instance of a driver becoming
/// unusable and its cleanup (upstream `defaultWipingDelay`, 30 s).
pub(in crate::dra) const CLEANUP_GRACE: Duration = Duration::from_secs(30);
/// The first retry after a failed cleanup; it doubles per failure.
const CLEANUP_RETRY_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between cleanup attempts (upstream: 5 min).
const CLEANUP_RETRY_MAX: Duration = Duration::from_secs(300);
/// When a failed cleanup is tried again, at start-up and per driver: up to
/// a fifth longer at random (upstream's jitter of 0.2), so that the nodes of
/// a cluster whose API server was away do not all come back at once.
pub(in crate::dra) const CLEANUP_RETRY: Backoff =
    Backoff::new(CLEANUP_RETRY_INITIAL, CLEANUP_RETRY_MAX).with_jitter(0.2);
/// How long one hook call may take before it counts as failed.
pub(in crate::dra) const CLEANUP_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a cleanup failed (the hook's own error, kept typed for callers that
/// look at its source); it is retried with backoff.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct CleanupError(pub Box<dyn std::error::Error + Send + Sync>);

/// A hook call that did not answer within [`CLEANUP_CALL_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?}")]
pub(crate) struct HookTimedOut(pub(crate) Duration);

/// A failed cleanup is retried on `CLEANUP_RETRY`'s schedule.
impl Classify for CleanupError {}

impl CleanupError {
    /// The hook did not answer in time.
    pub(crate) fn timed_out() -> Self {
        Self(Box::new(HookTimedOut(CLEANUP_CALL_TIMEOUT)))
    }
}

/// The cleanup hook.
#[async_trait::async_trait]
pub trait DriverCleanup: Send + Sync + 'static {
    /// Called once when the manager starts, before any driver is registered:
    /// withdraw everything this node advertised, since no driver can serve it
    /// yet. Retried with backoff until it succeeds.
    async fn node_started(&self) -> Result<(), CleanupError> {
        Ok(())
    }

    /// No instance of `driver` has been connected for the grace period (or
    /// its last instance was deregistered that long ago): withdraw what it
    /// advertised. Retried with backoff until it succeeds or an instance
    /// connects.
    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError>;
}

/// The agent's hook without an API server: it only logs; the manager records
/// the cleanup in status and events.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoggingCleanup;

#[async_trait::async_trait]
impl DriverCleanup for LoggingCleanup {
    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        tracing::info!(%driver, "DRA driver unusable for its grace period: its resources are withdrawn");
        Ok(())
    }
}

/// A hook whose every call fails when it does not answer within
/// [`CLEANUP_CALL_TIMEOUT`]: the manager puts each hook under it, so that
/// no caller keeps a timer of its own.
pub(crate) struct BoundedCleanup(pub(crate) Arc<dyn DriverCleanup>);

#[async_trait::async_trait]
impl DriverCleanup for BoundedCleanup {
    async fn node_started(&self) -> Result<(), CleanupError> {
        tokio::time::timeout(CLEANUP_CALL_TIMEOUT, self.0.node_started())
            .await
            .unwrap_or_else(|_| Err(CleanupError::timed_out()))
    }

    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        tokio::time::timeout(CLEANUP_CALL_TIMEOUT, self.0.driver_gone(driver))
            .await
            .unwrap_or_else(|_| Err(CleanupError::timed_out()))
    }
}

/// Identifies one scheduling of a driver's cleanup, so the end of an
/// abandoned run is not mistaken for the current one's.
pub(crate) type CleanupId = u64;

/// A driver's cleanup, from the moment it is scheduled until it succeeds or
/// an instance connects.
pub(crate) struct ScheduledCleanup {
    pub(crate) id: CleanupId,
    /// When the hook is (next) called (the grace period's end, then each
    /// retry), its failed calls in a row and why the last one failed.
    pub(crate) retry: Retry<Arc<CleanupError>>,
    /// The hook call in progress, if any.
    pub(crate) running: Option<AbortHandle>,
}

impl Drop for ScheduledCleanup {
    fn drop(&mut self) {
        // A cleanup no longer wanted stops at once.
        if let Some(running) = self.running.take() {
            running.abort();
        }
    }
}

/// The end of one cleanup hook call.
pub(crate) type CleanupDone = (String, CleanupId, Result<(), CleanupError>);

/// Calls [`DriverCleanup::node_started`] until it succeeds or `shutdown`.
pub(crate) async fn node_started(hook: Arc<dyn DriverCleanup>, shutdown: CancellationToken) {
    let mut retry = Retry::default();
    loop {
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            result = hook.node_started() => result,
        };
        let Err(error) = result else { return };
        retry.failed(error, &CLEANUP_RETRY, Instant::now());
        let delay = retry.due().map(|d| d.delay).unwrap_or_default();
        let error = retry.last_error().map(ToString::to_string);
        tracing::warn!(?error, retry_in = ?delay, "start-up DRA cleanup failed");
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

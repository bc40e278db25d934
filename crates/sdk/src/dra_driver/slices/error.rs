//! Why publishing a pool failed, and the driver's handler for it.

use std::sync::Arc;
use std::time::Duration;

use super::pool::InvalidPool;

/// Why publishing a pool failed. Each goes to the driver's error handler
/// ([`DraDriverBuilder::on_publish_error`](crate::dra_driver::DraDriverBuilder::on_publish_error)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The API would refuse the pool: it is not sent, nor retried until it
    /// changes.
    #[error("pool {pool:?} is not published: {reason}")]
    InvalidPool {
        /// The pool.
        pool: String,
        /// What is wrong with it.
        #[source]
        reason: InvalidPool,
    },
    /// A request failed; it is retried with backoff.
    #[error("pool {pool:?}: {operation}: {source}")]
    Api {
        /// The pool, or empty for a request of no pool (the Node's UID).
        pool: String,
        /// What was asked, such as `create ResourceSlice`.
        operation: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A request got no answer in time; it is retried with backoff.
    #[error("pool {pool:?}: {operation}: no answer within {timeout:?}")]
    Timeout {
        /// The pool, or empty.
        pool: String,
        /// What was asked.
        operation: &'static str,
        /// The request timeout.
        timeout: Duration,
    },
    /// The API server stored a slice without some of what was sent, which
    /// happens when a field's feature is off on the server: the slice is
    /// taken as stored, so as not to write it again and again.
    #[error(
        "pool {pool:?}: the API server dropped fields of slice {slice} (is a feature they need off on the server?)"
    )]
    DroppedFields {
        /// The pool.
        pool: String,
        /// The slice's index in the pool.
        slice: usize,
    },
    /// Watching the driver's slices failed; the watch starts again.
    #[error("watching ResourceSlices: {0}")]
    Watch(#[source] kube::runtime::watcher::Error),
}

/// What the driver does with each publishing failure.
pub type PublishErrorHandler = Arc<dyn Fn(&PublishError) + Send + Sync>;

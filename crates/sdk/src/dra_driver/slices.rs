//! Publishing the driver's devices as ResourceSlices (feature `kube`), as
//! the Go helper's resourceslice controller does:
//!
//! - the driver says what it has as [`Pool`]s on a [`Resources`] handle,
//!   at any time; a pool is split at the API's limits per slice
//!   ([`Pool::new`], [`Pool::with_counters`]) and checked before anything
//!   is sent ([`Pool::validate`]);
//! - each slice is created with `generateName: <index>-<driver>-<node>-`,
//!   an owner reference to the Node (`controller: true`), `spec.driver`,
//!   the pool's name, generation and slice count, and `spec.nodeName` for
//!   a pool of this node (the node's own identity may publish those), or
//!   the pool's node selector, `allNodes` or per-device node selection;
//! - the generation and which slices are updated, created and deleted
//!   follow the Go helper ([`plan`]);
//! - the driver's slices are watched: one changed or deleted by someone
//!   else, such as the kubelet wiping a driver that stayed away past its
//!   grace period, is put back at once, and the publisher's own writes
//!   stand over a watch that lags behind them ([`known`]);
//! - a failure is retried per pool with backoff (100 ms doubling to 30 s,
//!   with jitter), every API request has a timeout, and every failure goes
//!   to the driver's error handler and into the counts of
//!   [`PublishStats`]; a pool the API would refuse is reported once and
//!   not sent.

mod known;
mod plan;
mod pool;
mod publisher;
mod quantity;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use pool::{
    InvalidPool, MAX_COUNTER_SETS_PER_SLICE, MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_ADVANCED_FEATURES, NodeSelection, Pool, Slice, split_devices,
};
pub(crate) use publisher::{PublishSettings, publish};

/// The pools the driver publishes, and how publishing goes. Every change
/// is published. Cheap to clone: clones share the pools.
#[derive(Clone)]
pub struct Resources {
    pools: Arc<watch::Sender<BTreeMap<String, Pool>>>,
    stats: Arc<watch::Sender<PublishStats>>,
}

impl Default for Resources {
    fn default() -> Self {
        Self::new()
    }
}

impl Resources {
    /// No pools.
    pub fn new() -> Self {
        Self {
            pools: Arc::new(watch::channel(BTreeMap::new()).0),
            stats: Arc::new(watch::channel(PublishStats::default()).0),
        }
    }

    /// Sets pool `name`.
    pub fn set_pool(&self, name: impl Into<String>, pool: Pool) {
        let name = name.into();
        self.pools.send_if_modified(|pools| {
            if pools.get(&name) == Some(&pool) {
                return false;
            }
            pools.insert(name, pool);
            true
        });
    }

    /// Removes pool `name`: its slices are deleted.
    pub fn remove_pool(&self, name: &str) {
        self.pools
            .send_if_modified(|pools| pools.remove(name).is_some());
    }

    /// The pools.
    pub fn pools(&self) -> BTreeMap<String, Pool> {
        self.pools.borrow().clone()
    }

    /// How publishing has gone so far.
    pub fn stats(&self) -> PublishStats {
        self.stats.borrow().clone()
    }

    /// How publishing goes: a new value after every write and failure.
    pub fn stats_changes(&self) -> watch::Receiver<PublishStats> {
        self.stats.subscribe()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<BTreeMap<String, Pool>> {
        self.pools.subscribe()
    }
}

/// Counts of what the publisher did, since the driver started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishStats {
    /// Slices created.
    pub creates: u64,
    /// Slices updated.
    pub updates: u64,
    /// Slices deleted.
    pub deletes: u64,
    /// Failed attempts (each also went to the error handler).
    pub failures: u64,
    /// The last failure, until the next success.
    pub last_error: Option<String>,
}

/// Why publishing a pool failed. Each goes to the driver's error handler
/// ([`DraDriverBuilder::on_publish_error`](super::DraDriverBuilder::on_publish_error)).
#[derive(Debug, thiserror::Error)]
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

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

mod error;
mod known;
mod plan;
mod pool;
mod publisher;
mod quantity;
mod resources;
mod stats;

pub use error::{PublishError, PublishErrorHandler};
pub use pool::{
    InvalidPool, MAX_COUNTER_SETS_PER_SLICE, MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_ADVANCED_FEATURES, NodeSelection, Pool, Slice, split_devices,
};
pub(crate) use publisher::{PublishSettings, publish};
pub use resources::Resources;
pub use stats::PublishStats;

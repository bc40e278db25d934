//! What every request's handling reads: the node, its pods and runtime,
//! and the filters' authenticator and authorizer. Its own file, so that
//! the server and the endpoints both read it and neither imports the
//! other.

use std::sync::Arc;

use super::authn::Authenticator;
use super::authz::Authorizer;
use crate::fs_watch::FsWatcher;
use crate::pods::PodsHandle;
use crate::runtime::ContainerRuntime;

/// What every request's handling reads.
pub(crate) struct State {
    pub(crate) node_name: String,
    pub(crate) pods: PodsHandle,
    pub(crate) runtime: Arc<dyn ContainerRuntime>,
    pub(crate) fs_watcher: FsWatcher,
    pub(crate) debugging_handlers: bool,
    pub(crate) authenticator: Authenticator,
    pub(crate) authorizer: Authorizer,
    /// What `/metrics` encodes.
    pub(crate) metrics: Arc<Vec<Arc<dyn crate::metrics::MetricsSource>>>,
}

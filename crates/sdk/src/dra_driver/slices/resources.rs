//! The handle through which the driver says which pools to publish.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::pool::Pool;
use super::stats::PublishStats;

/// The pools the driver publishes, and how publishing goes. Every change
/// is published. Cheap to clone: clones share the pools.
#[derive(Clone)]
pub struct Resources {
    pools: Arc<watch::Sender<BTreeMap<String, Pool>>>,
    /// Updated by the publisher after every write and failure.
    pub(super) stats: Arc<watch::Sender<PublishStats>>,
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

    pub(crate) fn subscribe(&self) -> watch::Receiver<BTreeMap<String, Pool>> {
        self.pools.subscribe()
    }
}

//! The registered CSI drivers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

/// A registered CSI driver, as `nodeplugins status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CsiDriver {
    /// Driver name.
    pub name: String,
    /// The driver's CSI socket.
    pub endpoint: String,
    /// The highest CSI version both sides support.
    pub version: String,
    /// The node's identifier in the driver (NodeGetInfo); empty until it answered.
    pub node_id: String,
    /// Volumes the driver can attach to this node; 0 means no limit.
    pub max_volumes_per_node: i64,
    /// Where the node is accessible from, per the driver.
    pub accessible_topology: BTreeMap<String, String>,
}

/// Driver name → driver. Cheap to clone; all clones share the drivers.
#[derive(Debug, Clone, Default)]
pub struct CsiDriverStore {
    drivers: Arc<RwLock<HashMap<String, CsiDriver>>>,
}

impl CsiDriverStore {
    /// The drivers, sorted by name.
    pub fn list(&self) -> Vec<CsiDriver> {
        let map = self.drivers.read().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<CsiDriver> = map.values().cloned().collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// The driver named `name`.
    pub fn get(&self, name: &str) -> Option<CsiDriver> {
        self.drivers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(crate) fn set(&self, driver: CsiDriver) {
        self.drivers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(driver.name.clone(), driver);
    }

    /// Removes `name` if it is still registered at `endpoint`; returns whether it was.
    pub(crate) fn remove_if_endpoint(&self, name: &str, endpoint: &str) -> bool {
        let mut map = self.drivers.write().unwrap_or_else(|p| p.into_inner());
        if map.get(name).is_some_and(|d| d.endpoint == endpoint) {
            map.remove(name);
            true
        } else {
            false
        }
    }
}

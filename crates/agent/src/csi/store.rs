//! The registered CSI drivers.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

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
#[derive(Debug, Clone)]
pub struct CsiDriverStore {
    inner: Arc<RwLock<Inner>>,
    /// Ticks on every change, for those who follow the drivers.
    changes: Arc<watch::Sender<u64>>,
}

impl Default for CsiDriverStore {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            changes: Arc::new(watch::channel(0).0),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Name → (driver, token of the registration that wrote it).
    drivers: HashMap<String, (CsiDriver, u64)>,
    next_token: u64,
}

/// What a registration in progress replaced, to put back if it fails.
#[derive(Debug)]
pub(crate) struct Claim {
    token: u64,
    previous: Option<(CsiDriver, u64)>,
}

impl CsiDriverStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A counter that increases on every change of the drivers.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// The drivers, sorted by name.
    pub fn list(&self) -> Vec<CsiDriver> {
        let mut list: Vec<CsiDriver> = self
            .read()
            .drivers
            .values()
            .map(|(d, _)| d.clone())
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// The driver named `name`.
    pub fn get(&self, name: &str) -> Option<CsiDriver> {
        self.read().drivers.get(name).map(|(d, _)| d.clone())
    }

    /// Records `driver` for a registration that is starting, remembering what
    /// it replaced.
    pub(crate) fn claim(&self, driver: CsiDriver) -> Claim {
        let mut inner = self.write();
        inner.next_token += 1;
        let token = inner.next_token;
        let previous = inner.drivers.insert(driver.name.clone(), (driver, token));
        drop(inner);
        self.changed();
        Claim { token, previous }
    }

    /// Completes a registration: stores `driver` if the entry is still this
    /// registration's (a later registration may have replaced it meanwhile).
    pub(crate) fn complete(&self, claim: &Claim, driver: CsiDriver) -> bool {
        let mut inner = self.write();
        match inner.drivers.get_mut(&driver.name) {
            Some(entry) if entry.1 == claim.token => {
                entry.0 = driver;
                drop(inner);
                self.changed();
                true
            }
            _ => false,
        }
    }

    /// Undoes a failed registration: puts back what it replaced, if its
    /// entry is still there.
    pub(crate) fn abandon(&self, name: &str, claim: Claim) {
        let mut inner = self.write();
        if inner
            .drivers
            .get(name)
            .is_some_and(|(_, token)| *token == claim.token)
        {
            match claim.previous {
                Some(previous) => {
                    inner.drivers.insert(name.to_string(), previous);
                }
                None => {
                    inner.drivers.remove(name);
                }
            }
            drop(inner);
            self.changed();
        }
    }

    /// Removes `name` if it is still registered at `endpoint`; returns whether it was.
    pub(crate) fn remove_if_endpoint(&self, name: &str, endpoint: &str) -> bool {
        let mut inner = self.write();
        if inner
            .drivers
            .get(name)
            .is_some_and(|(d, _)| d.endpoint == endpoint)
        {
            inner.drivers.remove(name);
            drop(inner);
            self.changed();
            true
        } else {
            false
        }
    }
}

//! The registered CSI drivers, published as an immutable snapshot after
//! every change, as the other subsystems publish theirs. CSI has no task:
//! its only writer is the handler, whose changes are synchronous and
//! short, so a change is made under a lock that orders the writers and
//! published before the lock is let go. Readers never take it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::published::Publisher;

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

/// The drivers after one change. Cheap to clone: an `Arc`'s worth.
#[derive(Debug, Clone, Default)]
pub struct CsiSnapshot {
    /// Name → (driver, token of the registration that wrote it).
    drivers: HashMap<String, (Arc<CsiDriver>, u64)>,
    next_token: u64,
}

impl CsiSnapshot {
    /// The drivers, sorted by name.
    pub fn drivers(&self) -> Vec<CsiDriver> {
        let mut list: Vec<CsiDriver> = self
            .drivers
            .values()
            .map(|(d, _)| CsiDriver::clone(d))
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// The driver named `name`.
    pub fn get(&self, name: &str) -> Option<&CsiDriver> {
        self.drivers.get(name).map(|(d, _)| &**d)
    }
}

/// The registered drivers: read their [`snapshot`](Self::snapshot), follow
/// their [`changes`](Self::changes). Cheap to clone; all clones share them.
#[derive(Debug, Clone)]
pub struct CsiDriverStore {
    published: Arc<Publisher<CsiSnapshot>>,
    /// Held while a change is made from the current snapshot and published.
    writing: Arc<Mutex<()>>,
}

impl Default for CsiDriverStore {
    fn default() -> Self {
        Self {
            published: Arc::new(Publisher::new(CsiSnapshot::default()).0),
            writing: Arc::default(),
        }
    }
}

/// What a registration in progress replaced, to put back if it fails.
#[derive(Debug)]
pub(crate) struct PendingRegistration {
    token: u64,
    previous: Option<(Arc<CsiDriver>, u64)>,
}

impl CsiDriverStore {
    /// The drivers after the latest change.
    pub fn snapshot(&self) -> Arc<CsiSnapshot> {
        self.published.current()
    }

    /// A counter that increases on every change of the drivers.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.published.store().changes()
    }

    /// The drivers, sorted by name (of the latest snapshot).
    pub fn list(&self) -> Vec<CsiDriver> {
        self.snapshot().drivers()
    }

    /// The driver named `name` (in the latest snapshot).
    pub fn get(&self, name: &str) -> Option<CsiDriver> {
        self.snapshot().get(name).cloned()
    }

    /// Makes the next snapshot from the current one with `change`, which
    /// returns whether it changed anything and what to hand back; only a
    /// change is published.
    fn change<T>(&self, change: impl FnOnce(&mut CsiSnapshot) -> (bool, T)) -> T {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = CsiSnapshot::clone(&self.published.current());
        let (changed, value) = change(&mut next);
        if changed {
            self.published.publish(next);
        }
        value
    }

    /// Records `driver` for a registration that is starting, remembering what
    /// it replaced.
    pub(crate) fn begin(&self, driver: CsiDriver) -> PendingRegistration {
        self.change(|drivers| {
            drivers.next_token += 1;
            let token = drivers.next_token;
            let previous = drivers
                .drivers
                .insert(driver.name.clone(), (Arc::new(driver), token));
            (true, PendingRegistration { token, previous })
        })
    }

    /// Completes a registration: stores `driver` if the entry is still this
    /// registration's (a later registration may have replaced it meanwhile).
    pub(crate) fn complete(&self, pending: &PendingRegistration, driver: CsiDriver) -> bool {
        self.change(|drivers| match drivers.drivers.get_mut(&driver.name) {
            Some(entry) if entry.1 == pending.token => {
                entry.0 = Arc::new(driver);
                (true, true)
            }
            _ => (false, false),
        })
    }

    /// Undoes a failed registration: puts back what it replaced, if its
    /// entry is still there.
    pub(crate) fn abandon(&self, name: &str, pending: PendingRegistration) {
        self.change(|drivers| {
            let still_its = drivers
                .drivers
                .get(name)
                .is_some_and(|(_, token)| *token == pending.token);
            if !still_its {
                return (false, ());
            }
            match pending.previous {
                Some(previous) => {
                    drivers.drivers.insert(name.to_string(), previous);
                }
                None => {
                    drivers.drivers.remove(name);
                }
            }
            (true, ())
        });
    }

    /// Removes `name` if it is still registered at `endpoint`; returns whether it was.
    pub(crate) fn remove_if_endpoint(&self, name: &str, endpoint: &str) -> bool {
        self.change(|drivers| {
            let there = drivers
                .drivers
                .get(name)
                .is_some_and(|(d, _)| d.endpoint == endpoint);
            if there {
                drivers.drivers.remove(name);
            }
            (there, there)
        })
    }
}

#[cfg(test)]
mod tests;

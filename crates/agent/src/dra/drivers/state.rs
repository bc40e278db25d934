//! What the DRA manager knows, owned by its task: per driver its instances
//! in registration order (one per service endpoint), each with its published
//! connection state and device health, and the driver's pending cleanup.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::dra::drivers::cleanup::ScheduledCleanup;
use crate::dra::drivers::connection::{Channel, Demand, Link};
use crate::dra::drivers::health::HealthReports;
use nodeplugins_api::dra_client::{DraService, HealthService};

/// Identifies an instance for the life of the manager, across drivers.
pub(crate) type InstanceId = u64;

/// One registered instance of a driver.
pub(crate) struct Instance {
    pub(crate) id: InstanceId,
    pub(crate) endpoint: String,
    pub(crate) service: DraService,
    pub(crate) health_service: Option<HealthService>,
    pub(crate) registered_at: SystemTime,
    /// Published for calls and the health stream; the monitor's reports
    /// are applied here.
    pub(crate) link: watch::Sender<Link>,
    pub(crate) channel: Channel,
    /// Shared with snapshots; copied when changed while one holds it.
    pub(crate) health: Arc<HealthReports>,
    /// Wakes the monitor: to make its first connection, once the plugin was
    /// told it is registered.
    pub(crate) demand: Arc<Demand>,
    /// Stops the monitor (letting running calls drain) and the health stream.
    pub(crate) close: CancellationToken,
}

impl Instance {
    pub(crate) fn connected(&self) -> bool {
        self.link.borrow().connected()
    }
}

/// One driver.
#[derive(Default)]
pub(crate) struct Driver {
    /// Oldest registration first.
    pub(crate) instances: Vec<Instance>,
    pub(crate) cleanup: Option<ScheduledCleanup>,
    /// Set when the cleanup ran; cleared when an instance connects.
    pub(crate) cleaned_up_at: Option<SystemTime>,
}

impl Driver {
    /// The instance calls go to: the newest connected one, else the newest.
    pub(crate) fn in_use(&self) -> Option<&Instance> {
        self.instances
            .iter()
            .rev()
            .find(|i| i.connected())
            .or(self.instances.last())
    }

    pub(crate) fn any_connected(&self) -> bool {
        self.instances.iter().any(Instance::connected)
    }

    /// Nothing left to remember.
    pub(crate) fn is_empty(&self) -> bool {
        self.instances.is_empty() && self.cleanup.is_none()
    }
}

/// Every driver.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) drivers: BTreeMap<String, Driver>,
    /// Instance → its driver, for reports that name only the instance.
    pub(crate) driver_of: HashMap<InstanceId, String>,
    pub(crate) next_instance: InstanceId,
}

impl State {
    /// Instance `id` and its driver's name.
    pub(crate) fn instance_mut(&mut self, id: InstanceId) -> Option<(&str, &mut Instance)> {
        let name = self.driver_of.get(&id)?;
        let driver = self.drivers.get_mut(name)?;
        let instance = driver.instances.iter_mut().find(|i| i.id == id)?;
        Some((name.as_str(), instance))
    }
}

//! One extended resource as the device manager knows it: its plugin
//! instances (keyed by id; the newest is primary), the device list each
//! last sent, and the devices last known when none is connected.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use nodeplugins_api::constants::device_plugin::{HEALTHY, UNHEALTHY};
use nodeplugins_api::deviceplugin::v1beta1::Device;
use tokio::time::Instant;

use crate::device::registration::plugin_client::PluginClient;

/// Identifies a plugin instance for the life of the manager; a later
/// connection has a higher id.
pub(crate) type InstanceId = u64;

/// (pod UID, container, resource).
pub(crate) type AllocationKey = (String, String, String);

/// A device list by id, shared between the state and its snapshots.
pub(crate) type Devices = Arc<BTreeMap<String, Device>>;

/// One connected plugin instance.
pub(crate) struct Instance {
    pub(crate) plugin: PluginClient,
    pub(crate) connected_at: SystemTime,
    /// Its last device list, by id; `None` until it sends one.
    pub(crate) devices: Option<Devices>,
}

/// One extended resource.
#[derive(Default)]
pub(crate) struct Resource {
    /// Instance id → instance; the highest id (newest) is the primary.
    pub(crate) instances: BTreeMap<InstanceId, Instance>,
    /// The devices reported before the last instance left, all unhealthy,
    /// shown until an instance reports a list again.
    pub(crate) last_known: Devices,
    /// Set while no instance is connected: the resource is forgotten a
    /// grace period after this.
    pub(crate) stopped_since: Option<Instant>,
}

impl Resource {
    /// The devices that count: the list of the newest instance that sent
    /// one, else those last known before every instance left.
    pub(crate) fn devices(&self) -> &Devices {
        self.instances
            .values()
            .rev()
            .find_map(|i| i.devices.as_ref())
            .unwrap_or(&self.last_known)
    }

    /// (healthy, all) devices.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let devices = self.devices();
        let healthy = devices.values().filter(|d| is_healthy(d)).count();
        (healthy, devices.len())
    }

    /// The newest instance: the one calls go to.
    pub(crate) fn primary(&self) -> Option<(&InstanceId, &Instance)> {
        self.instances.iter().next_back()
    }

    /// Forgets instance `id`; when it was the last one, the devices turn
    /// unhealthy and the grace period starts. When the survivors have not
    /// sent a list yet, the devices stay as they were until one does: a
    /// plugin re-registering leaves its old instance behind the new one, and
    /// the old one going first must not blank the resource in between.
    /// Returns the instance.
    pub(crate) fn remove_instance(&mut self, id: InstanceId, now: Instant) -> Option<Instance> {
        let view = self.devices().clone();
        let gone = self.instances.remove(&id)?;
        if self.instances.is_empty() {
            self.last_known = Arc::new(
                view.iter()
                    .map(|(id, device)| {
                        let mut device = device.clone();
                        device.health = UNHEALTHY.into();
                        (id.clone(), device)
                    })
                    .collect(),
            );
            self.stopped_since = Some(now);
        } else if self.instances.values().all(|i| i.devices.is_none()) {
            self.last_known = view;
        }
        Some(gone)
    }
}

/// Whether the plugin reports `device` healthy.
pub(crate) fn is_healthy(device: &Device) -> bool {
    device.health == HEALTHY
}

/// The NUMA nodes a device is attached to.
pub(crate) fn numa_nodes(device: &Device) -> Vec<i64> {
    device
        .topology
        .as_ref()
        .map(|t| t.nodes.iter().map(|n| n.id).collect())
        .unwrap_or_default()
}

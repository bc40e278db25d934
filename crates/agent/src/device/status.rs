//! The device manager's state as status shows it.

use std::path::PathBuf;

use super::state::{Resource, State, numa_nodes};
use crate::unix_time::unix_ms;

/// One device, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStatus {
    /// Device id.
    pub id: String,
    /// `Healthy` or `Unhealthy`.
    pub health: String,
    /// NUMA nodes the device is attached to.
    pub numa_nodes: Vec<i64>,
}

/// One connected plugin instance, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstanceStatus {
    /// The plugin's socket.
    pub socket: PathBuf,
    /// Whether this is the instance whose devices count.
    pub primary: bool,
    /// The plugin wants PreStartContainer calls.
    pub pre_start_required: bool,
    /// The plugin implements GetPreferredAllocation.
    pub get_preferred_allocation_available: bool,
    /// When it connected (Unix milliseconds).
    pub connected_at_unix_ms: u64,
}

/// One resource, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceStatus {
    /// Extended resource name.
    pub name: String,
    /// All devices.
    pub capacity: usize,
    /// Healthy devices.
    pub allocatable: usize,
    /// Devices held by containers.
    pub allocated: usize,
    /// Devices being allocated right now.
    pub reserved: usize,
    /// The devices.
    pub devices: Vec<DeviceStatus>,
    /// Connected plugin instances.
    pub instances: Vec<InstanceStatus>,
    /// Time left before the resource is forgotten, while no plugin is connected.
    pub removal_in_ms: Option<u64>,
}

impl State {
    /// One resource as status shows it, without the time to its removal
    /// (which depends on when it is read).
    pub(crate) fn resource_status(&self, name: &str, r: &Resource) -> ResourceStatus {
        let (allocatable, capacity) = r.counts();
        let primary = r.primary().map(|(id, _)| *id);
        ResourceStatus {
            name: name.to_string(),
            capacity,
            allocatable,
            allocated: self
                .allocations
                .values()
                .filter(|a| a.resource == name)
                .map(|a| a.devices.len())
                .sum(),
            reserved: self.reserved(name).len(),
            devices: r
                .devices()
                .values()
                .map(|d| DeviceStatus {
                    id: d.id.clone(),
                    health: d.health.clone(),
                    numa_nodes: numa_nodes(d),
                })
                .collect(),
            instances: r
                .instances
                .iter()
                .map(|(id, i)| {
                    let options = i.plugin.options();
                    InstanceStatus {
                        socket: i.plugin.socket().to_owned(),
                        primary: Some(*id) == primary,
                        pre_start_required: options.pre_start_required,
                        get_preferred_allocation_available: options
                            .get_preferred_allocation_available,
                        connected_at_unix_ms: unix_ms(i.connected_at),
                    }
                })
                .collect(),
            removal_in_ms: None,
        }
    }
}

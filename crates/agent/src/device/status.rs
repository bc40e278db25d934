//! The device manager's state as status shows it.

use std::path::PathBuf;

/// One device, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStatus {
    /// The id the plugin lists the device under.
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

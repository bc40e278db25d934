//! What the device manager holds, for readers that build their own views
//! of it (the pod-resources API): the allocations, shared rather than
//! copied, and the devices that can be allocated.

use std::sync::Arc;

use super::container_allocation::ContainerAllocation;
use super::state::{State, is_healthy, numa_nodes};

/// A device that can be allocated: reported healthy by its plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocatableDevice {
    /// Extended resource name.
    pub resource: String,
    /// Device id.
    pub id: String,
    /// The NUMA nodes it is attached to (empty: no topology reported).
    pub numa: Vec<i64>,
}

impl State {
    /// Every allocation, sorted by pod UID, container and resource. An
    /// allocation never changes once made, so equal pointers mean equal
    /// allocations.
    pub(crate) fn allocation_snapshot(&self) -> Vec<Arc<ContainerAllocation>> {
        self.allocations.values().cloned().collect()
    }

    /// Every healthy device, sorted by resource and id.
    pub(crate) fn allocatable(&self) -> Vec<AllocatableDevice> {
        self.resources
            .iter()
            .flat_map(|(resource, r)| {
                r.devices()
                    .values()
                    .filter(|d| is_healthy(d))
                    .map(move |d| AllocatableDevice {
                        resource: resource.clone(),
                        id: d.id.clone(),
                        numa: numa_nodes(d),
                    })
            })
            .collect()
    }
}

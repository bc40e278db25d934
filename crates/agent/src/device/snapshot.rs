//! What the device manager publishes after every change: an immutable
//! [`DeviceSnapshot`] that readers (status, the pod-resources API, the
//! Kubernetes API publisher) read without asking the manager's task. The
//! device lists and allocations are shared with the manager rather than
//! copied.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::resource::{Devices, is_healthy, numa_nodes};
use super::state::State;
use super::status::{DeviceStatus, InstanceStatus, ResourceStatus};
use crate::checkpoint::CheckpointProblem;
use crate::common::unix_time::unix_ms;
use crate::device::allocation::container_allocation::ContainerAllocation;

/// The device manager's state after a change. Device lists and
/// allocations are shared with the state, so publishing one costs a
/// reference count each; what status and the allocatable list show of them
/// is worked out when read.
#[derive(Debug, Default)]
pub struct DeviceSnapshot {
    /// Published by the running manager, after its checkpoint was read
    /// (the first snapshot, before that, is empty).
    restored: bool,
    /// How many snapshots the manager published before this one: a reader
    /// that saw one knows whether a later one is as new.
    pub(crate) generation: u64,
    /// The resources, sorted by name.
    resources: Vec<ResourceSnapshot>,
    allocations: Vec<Arc<ContainerAllocation>>,
    checkpoint_problem: Option<CheckpointProblem>,
}

/// One resource.
#[derive(Debug)]
struct ResourceSnapshot {
    name: String,
    devices: Devices,
    instances: Vec<InstanceStatus>,
    reserved: usize,
    /// When it is removed, while no plugin is connected.
    removal_at: Option<Instant>,
}

impl crate::published::Ready for DeviceSnapshot {
    fn ready(&self) -> bool {
        self.restored
    }
}

impl DeviceSnapshot {
    /// The snapshot of `state`; resources without a plugin are removed
    /// `grace` after they stopped.
    pub(crate) fn of(
        state: &State,
        grace: Duration,
        checkpoint_problem: Option<CheckpointProblem>,
    ) -> Self {
        DeviceSnapshot {
            restored: true,
            generation: 0,
            resources: state
                .resources
                .iter()
                .map(|(name, r)| {
                    let primary = r.primary().map(|(id, _)| *id);
                    ResourceSnapshot {
                        name: name.clone(),
                        devices: r.devices().clone(),
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
                        reserved: state.allocator.reserved(name).len(),
                        removal_at: r.stopped_since.map(|t| t + grace),
                    }
                })
                .collect(),
            allocations: state.allocator.allocations().cloned().collect(),
            checkpoint_problem,
        }
    }

    /// A running manager's snapshot holding `allocations` (sorted by pod
    /// UID, container and resource) and no resource: for tests of readers.
    #[cfg(all(test, feature = "kube"))]
    pub(crate) fn with_allocations(allocations: Vec<Arc<ContainerAllocation>>) -> Self {
        Self {
            restored: true,
            allocations,
            ..Self::default()
        }
    }

    /// Published by the running manager, once it had read its checkpoint
    /// (until then it knows no allocation).
    pub fn running(&self) -> bool {
        self.restored
    }

    /// The resources as of `now`, sorted by name.
    pub fn status_at(&self, now: Instant) -> Vec<ResourceStatus> {
        self.resources
            .iter()
            .map(|r| ResourceStatus {
                name: r.name.clone(),
                capacity: r.devices.len(),
                allocatable: r.devices.values().filter(|d| is_healthy(d)).count(),
                // Distinct devices: an ended init container's devices are
                // recorded again for the container they are handed on to.
                allocated: self
                    .allocations
                    .iter()
                    .filter(|a| a.resource == r.name)
                    .flat_map(|a| &a.devices)
                    .collect::<std::collections::HashSet<_>>()
                    .len(),
                reserved: r.reserved,
                devices: r
                    .devices
                    .values()
                    .map(|d| DeviceStatus {
                        id: d.id.clone(),
                        health: d.health.clone(),
                        numa_nodes: numa_nodes(d),
                    })
                    .collect(),
                instances: r.instances.clone(),
                removal_in_ms: r
                    .removal_at
                    .map(|at| at.saturating_duration_since(now).as_millis() as u64),
            })
            .collect()
    }

    /// Every allocation, sorted by pod UID, container and resource. An
    /// allocation never changes once made, so equal pointers mean equal
    /// allocations.
    pub fn allocations(&self) -> &[Arc<ContainerAllocation>] {
        &self.allocations
    }

    /// Pod `pod_uid`'s allocations, sorted by container and resource.
    pub fn allocations_of(&self, pod_uid: &str) -> &[Arc<ContainerAllocation>] {
        let start = self
            .allocations
            .partition_point(|a| a.pod_uid.as_str() < pod_uid);
        let len = self.allocations[start..]
            .iter()
            .take_while(|a| a.pod_uid == pod_uid)
            .count();
        &self.allocations[start..start + len]
    }

    /// Whether `resource` is a device plugin resource: one a plugin
    /// registered (or the checkpoint names, while it waits for its plugin),
    /// or one some container holds devices of (the kubelet's
    /// `isDevicePluginResource`).
    pub fn is_device_resource(&self, resource: &str) -> bool {
        self.resources
            .binary_search_by(|r| r.name.as_str().cmp(resource))
            .is_ok()
            || self.allocations.iter().any(|a| a.resource == resource)
    }

    /// Every healthy device, with its NUMA nodes, sorted by resource and id.
    pub fn allocatable(&self) -> Vec<AllocatableDevice> {
        self.resources
            .iter()
            .flat_map(|r| {
                r.devices
                    .values()
                    .filter(|d| is_healthy(d))
                    .map(|d| AllocatableDevice {
                        resource: r.name.clone(),
                        id: d.id.clone(),
                        numa: numa_nodes(d),
                    })
            })
            .collect()
    }

    /// Whether `other` has the same device lists (and so the same
    /// allocatable devices): they are shared between snapshots until a
    /// plugin sends a new list, so comparing pointers tells.
    pub(crate) fn same_devices(&self, other: &Self) -> bool {
        self.resources.len() == other.resources.len()
            && self
                .resources
                .iter()
                .zip(&other.resources)
                .all(|(a, b)| a.name == b.name && Arc::ptr_eq(&a.devices, &b.devices))
    }

    /// What is wrong with the checkpoint, if anything.
    pub fn checkpoint_problem(&self) -> Option<&CheckpointProblem> {
        self.checkpoint_problem.as_ref()
    }
}

/// A device that can be allocated: reported healthy by its plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocatableDevice {
    /// Extended resource name.
    pub resource: String,
    /// The id the plugin lists the device under.
    pub id: String,
    /// The NUMA nodes it is attached to (empty: no topology reported).
    pub numa: Vec<i64>,
}

//! What the device manager publishes after every change: an immutable
//! [`DeviceSnapshot`] that readers (status, the pod-resources API, the
//! Kubernetes API publisher) read without asking the manager's task. The
//! allocations are shared with the manager rather than copied.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::container_allocation::ContainerAllocation;
use super::state::{State, is_healthy, numa_nodes};
use super::status::ResourceStatus;
use crate::checkpoint::CheckpointProblem;

/// The device manager's state after a change.
#[derive(Debug, Default)]
pub struct DeviceSnapshot {
    /// Published by the running manager, after its checkpoint was read
    /// (the first snapshot, before that, is empty).
    restored: bool,
    /// The resources, sorted by name; `removal_in_ms` is filled in when read.
    resources: Vec<(ResourceStatus, Option<Instant>)>,
    allocations: Vec<Arc<ContainerAllocation>>,
    allocatable: Vec<AllocatableDevice>,
    checkpoint_problem: Option<CheckpointProblem>,
}

impl DeviceSnapshot {
    /// Whether the manager had read its checkpoint: until then it knows no
    /// allocation.
    pub fn restored(&self) -> bool {
        self.restored
    }

    /// The resources as of `now`, sorted by name.
    pub fn status_at(&self, now: Instant) -> Vec<ResourceStatus> {
        self.resources
            .iter()
            .map(|(status, removal_at)| ResourceStatus {
                removal_in_ms: removal_at
                    .map(|at| at.saturating_duration_since(now).as_millis() as u64),
                ..status.clone()
            })
            .collect()
    }

    /// Every allocation, sorted by pod UID, container and resource. An
    /// allocation never changes once made, so equal pointers mean equal
    /// allocations.
    pub fn allocations(&self) -> &[Arc<ContainerAllocation>] {
        &self.allocations
    }

    /// Every healthy device, with its NUMA nodes, sorted by resource and id.
    pub fn allocatable(&self) -> &[AllocatableDevice] {
        &self.allocatable
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
    /// Device id.
    pub id: String,
    /// The NUMA nodes it is attached to (empty: no topology reported).
    pub numa: Vec<i64>,
}

impl State {
    /// The snapshot of this state; resources without a plugin are removed
    /// `grace` after they stopped.
    pub(crate) fn snapshot(
        &self,
        grace: Duration,
        checkpoint_problem: Option<CheckpointProblem>,
    ) -> DeviceSnapshot {
        DeviceSnapshot {
            restored: true,
            resources: self
                .resources
                .iter()
                .map(|(name, r)| {
                    let status = self.resource_status(name, r);
                    (status, r.stopped_since.map(|t| t + grace))
                })
                .collect(),
            allocations: self.allocations.values().cloned().collect(),
            allocatable: self.allocatable(),
            checkpoint_problem,
        }
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

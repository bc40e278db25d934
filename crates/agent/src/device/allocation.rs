//! Allocations: what a container asks for, what it was given (devices and
//! the plugin's Allocate response), and why a request was refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use nodeplugins_api::deviceplugin::v1beta1::ContainerAllocateResponse;

use super::plugin_client::{AllocateCallError, PluginCallError, PluginClient};
use crate::checkpoint::CheckpointError;

/// A host path mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MountSpec {
    /// Path in the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// A device node made available in the container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceNodeSpec {
    /// Path in the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// Cgroup permissions: any of `r`, `w`, `m`.
    pub permissions: String,
}

/// The devices of one resource allocated to one container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerAllocation {
    /// Pod UID.
    pub pod_uid: String,
    /// The pod's namespace (empty in checkpoints from before pods had names).
    #[serde(default)]
    pub pod_namespace: String,
    /// The pod's name (empty in checkpoints from before pods had names).
    #[serde(default)]
    pub pod_name: String,
    /// Container name.
    pub container: String,
    /// Extended resource name.
    pub resource: String,
    /// Allocated device ids.
    pub devices: Vec<String>,
    /// Environment variables for the container.
    pub envs: BTreeMap<String, String>,
    /// Mounts for the container.
    pub mounts: Vec<MountSpec>,
    /// Device nodes for the container.
    pub device_specs: Vec<DeviceNodeSpec>,
    /// Annotations for the container runtime.
    pub annotations: BTreeMap<String, String>,
    /// Fully qualified CDI device names.
    pub cdi_devices: Vec<String>,
    /// Device id → the NUMA nodes it was attached to when allocated (absent:
    /// no topology reported).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub numa: BTreeMap<String, Vec<i64>>,
}

impl ContainerAllocation {
    pub(crate) fn new(
        request: &AllocationRequest,
        resource: &str,
        chosen: Chosen,
        response: ContainerAllocateResponse,
    ) -> Self {
        let Chosen { devices, numa } = chosen;
        Self {
            pod_uid: request.pod_uid.clone(),
            pod_namespace: request.pod_namespace.clone(),
            pod_name: request.pod_name.clone(),
            container: request.container.clone(),
            resource: resource.into(),
            devices,
            envs: response.envs.into_iter().collect(),
            mounts: response
                .mounts
                .into_iter()
                .map(|m| MountSpec {
                    container_path: m.container_path,
                    host_path: m.host_path,
                    read_only: m.read_only,
                })
                .collect(),
            device_specs: response
                .devices
                .into_iter()
                .map(|d| DeviceNodeSpec {
                    container_path: d.container_path,
                    host_path: d.host_path,
                    permissions: d.permissions,
                })
                .collect(),
            annotations: response.annotations.into_iter().collect(),
            cdi_devices: response.cdi_devices.into_iter().map(|c| c.name).collect(),
            numa,
        }
    }
}

/// A request for devices for one container: resource name → count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationRequest {
    /// Pod UID.
    pub pod_uid: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// Container name.
    pub container: String,
    /// Resource name → number of devices.
    pub resources: BTreeMap<String, usize>,
}

impl AllocationRequest {
    /// A request for pod `namespace/name` (UID `pod_uid`), container
    /// `container`, with no resources yet.
    pub fn new(pod_uid: &str, namespace: &str, name: &str, container: &str) -> Self {
        Self {
            pod_uid: pod_uid.into(),
            pod_namespace: namespace.into(),
            pod_name: name.into(),
            container: container.into(),
            resources: BTreeMap::new(),
        }
    }

    /// Adds `count` devices of `resource`.
    pub fn resource(mut self, resource: &str, count: usize) -> Self {
        self.resources.insert(resource.into(), count);
        self
    }
}

/// Why devices could not be allocated; messages follow upstream's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AllocateError {
    /// No plugin ever registered the resource.
    #[error("cannot allocate unregistered device {0}")]
    Unregistered(String),
    /// Every device of the resource is unhealthy.
    #[error("no healthy devices present; cannot allocate unhealthy devices {0}")]
    NoHealthy(String),
    /// Devices held by the container turned unhealthy.
    #[error(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {0}"
    )]
    PreviouslyAllocatedUnhealthy(String),
    /// The container already holds a different number of devices.
    #[error(
        "pod {pod:?} container {container:?} changed request for resource {resource:?} from {from} to {to}"
    )]
    ChangedRequest {
        /// Pod UID.
        pod: String,
        /// Container name.
        container: String,
        /// Resource.
        resource: String,
        /// Devices held.
        from: usize,
        /// Devices requested.
        to: usize,
    },
    /// Not enough free healthy devices.
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        /// Resource.
        resource: String,
        /// Devices requested.
        requested: usize,
        /// Devices free.
        available: usize,
    },
    /// The resource's plugin is not connected (within its grace period).
    #[error("endpoint for {0} has been stopped: no device plugin is connected")]
    Stopped(String),
    /// The Allocate call failed.
    #[error("Allocate failed for {resource}: {source}")]
    Rpc {
        /// Resource.
        resource: String,
        /// The plugin's answer.
        #[source]
        source: AllocateCallError,
    },
    /// GetPreferredAllocation failed or went unanswered.
    #[error("device plugin GetPreferredAllocation rpc failed with err: {source}")]
    Preferred {
        /// Resource.
        resource: String,
        /// The cause.
        #[source]
        source: PluginCallError,
    },
    /// PreStartContainer failed or went unanswered.
    #[error("device plugin PreStartContainer rpc failed with err: {source}")]
    PreStart {
        /// Resource.
        resource: String,
        /// The cause.
        #[source]
        source: PluginCallError,
    },
    /// The allocation could not be written to the checkpoint, so it was undone.
    #[error("cannot record the allocation: {0}")]
    Checkpoint(#[source] Arc<CheckpointError>),
    /// A request for zero devices.
    #[error("a request for {0} must ask for at least one device")]
    Zero(String),
    /// A request naming no resource.
    #[error("the request names no resource")]
    Empty,
    /// The pod UID holds devices under another name.
    #[error("pod {pod} is {known}, not {given}")]
    PodRenamed {
        /// Pod UID.
        pod: String,
        /// `namespace/name` it holds devices under.
        known: String,
        /// `namespace/name` of the request.
        given: String,
    },
    /// The device manager is not running.
    #[error("the device manager is stopping")]
    Stopping,
}

impl AllocateError {
    /// The resource the error is about, if it is about one.
    pub fn resource(&self) -> Option<&str> {
        match self {
            Self::Unregistered(r)
            | Self::NoHealthy(r)
            | Self::PreviouslyAllocatedUnhealthy(r)
            | Self::Stopped(r)
            | Self::Zero(r) => Some(r),
            Self::ChangedRequest { resource, .. }
            | Self::Unavailable { resource, .. }
            | Self::Rpc { resource, .. }
            | Self::Preferred { resource, .. }
            | Self::PreStart { resource, .. } => Some(resource),
            Self::Checkpoint(_) | Self::Empty | Self::PodRenamed { .. } | Self::Stopping => None,
        }
    }
}

/// What step 1 decided for one resource.
pub(crate) enum Planned {
    /// The container already holds these devices.
    Held(ContainerAllocation),
    /// Devices must be chosen and allocated.
    Needed {
        resource: String,
        count: usize,
        /// Every free healthy device, aligned choice first.
        order: Vec<String>,
        /// The primary instance.
        plugin: PluginClient,
    },
}

/// Identifies an allocation in progress.
pub(crate) type ReservationId = u64;

/// Devices reserved for one resource, with the NUMA nodes each is attached
/// to (devices without topology are left out).
pub(crate) struct Chosen {
    pub(crate) devices: Vec<String>,
    pub(crate) numa: BTreeMap<String, Vec<i64>>,
}

/// A reservation and the devices it holds, per chosen resource in order.
pub(crate) type ReservedChoices = (ReservationId, Vec<Chosen>);

/// Devices chosen for one resource, to reserve.
pub(crate) struct Choice {
    pub(crate) resource: String,
    pub(crate) devices: Vec<String>,
}

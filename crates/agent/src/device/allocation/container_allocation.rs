//! What a container asks for (resource name → count) and what it was given
//! (devices and the plugin's Allocate response).

use std::collections::BTreeMap;

use nodeplugins_api::deviceplugin::v1beta1::ContainerAllocateResponse;

use crate::runtime::{DeviceNodeSpec, MountSpec};

/// The devices of one resource allocated to one container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerAllocation {
    /// The UID of the pod the devices are allocated to.
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
    /// What `devices` (with their NUMA nodes) gave the container, with the
    /// plugin's Allocate `response`.
    pub(crate) fn new(
        request: &AllocationRequest,
        resource: &str,
        devices: Vec<String>,
        numa: BTreeMap<String, Vec<i64>>,
        response: ContainerAllocateResponse,
    ) -> Self {
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
                    propagation: crate::runtime::MountPropagation::Private,
                    selinux_relabel: false,
                    recursive_read_only: false,
                    image: None,
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

/// A request for devices for one container: resource name → count. The
/// admin socket's `allocate` line carries it as it is (the UID as `pod`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocationRequest {
    /// The UID of the pod asking.
    #[serde(rename = "pod")]
    pub pod_uid: String,
    /// The pod's namespace.
    #[serde(default)]
    pub pod_namespace: String,
    /// The pod's name.
    #[serde(default)]
    pub pod_name: String,
    /// Container name.
    pub container: String,
    /// Resource name → number of devices.
    pub resources: BTreeMap<String, usize>,
    /// Resource name → devices of the pod's earlier (not restartable) init
    /// containers that this container may be given again, first: an init
    /// container has ended before the containers after it start (the
    /// kubelet's `devicesToReuse`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reusable: BTreeMap<String, Vec<String>>,
    /// Whether the container may already run with what it holds (the
    /// agent restarted under it): a holding with the count asked for is
    /// then kept as it is, healthy or not and its plugin registered or
    /// not, as the kubelet keeps a running container's devices at its
    /// restart. Otherwise a holding is kept only while all its devices
    /// are healthy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub may_be_running: bool,
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
            reusable: BTreeMap::new(),
            may_be_running: false,
        }
    }

    /// Marks the container as possibly running already with what it holds
    /// (see [`may_be_running`](Self::may_be_running)).
    pub fn may_be_running(mut self) -> Self {
        self.may_be_running = true;
        self
    }

    /// Adds `count` devices of `resource`.
    pub fn resource(mut self, resource: &str, count: usize) -> Self {
        self.resources.insert(resource.into(), count);
        self
    }

    /// Lets the container be given `devices` of `resource` again (devices
    /// of the pod's init containers that ended before it starts).
    pub fn reuse(mut self, resource: &str, devices: Vec<String>) -> Self {
        if !devices.is_empty() {
            self.reusable.insert(resource.into(), devices);
        }
        self
    }
}

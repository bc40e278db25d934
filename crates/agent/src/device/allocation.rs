//! What a container was given: devices and the plugin's Allocate response.

use std::collections::BTreeMap;

use nodeplugins_api::deviceplugin::v1beta1::ContainerAllocateResponse;

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
}

impl ContainerAllocation {
    pub(crate) fn new(
        pod_uid: &str,
        container: &str,
        resource: &str,
        devices: Vec<String>,
        response: ContainerAllocateResponse,
    ) -> Self {
        Self {
            pod_uid: pod_uid.into(),
            container: container.into(),
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
        }
    }
}

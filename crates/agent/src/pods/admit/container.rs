//! What a container runtime needs to start one container of an admitted
//! pod, and how it is made: the device plugins' Allocate answers for the
//! container merged as the kubelet merges them
//! (`podDevices.deviceRunContainerOptions`: the first setting of an
//! environment variable, annotation, device path or mount path wins, CDI
//! names once each), and the CDI devices of the pod's claims the container
//! names, narrowed to the requests it asks for (the kubelet's DRA manager
//! `GetResources`).

use std::collections::BTreeMap;
#[cfg(feature = "kube")]
use std::collections::{BTreeSet, HashSet};

#[cfg(feature = "kube")]
use crate::device::ContainerAllocation;
#[cfg(feature = "kube")]
use crate::dra::{ClaimPod, PodClaimResult};
#[cfg(feature = "kube")]
use crate::pods::pod::{ContainerDevices, PodClaims};
use crate::runtime::{DeviceNodeSpec, MountSpec};

/// Which part of its pod a container is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerKind {
    /// An init container: runs to completion before the next one; the
    /// containers after it may be given its devices again.
    Init,
    /// A restartable init container (`restartPolicy: Always`, a sidecar):
    /// keeps its devices for the pod's life.
    Sidecar,
    /// An app container.
    #[default]
    App,
}

/// Everything one container gets from the node's plugins.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerResources {
    /// The container.
    pub name: String,
    /// Which part of the pod it is.
    pub kind: ContainerKind,
    /// Extended resource → the device ids allocated to the container.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, Vec<String>>,
    /// Device id → the NUMA nodes it had when allocated (devices with no
    /// topology left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub numa: BTreeMap<String, Vec<i64>>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Host paths mounted into the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountSpec>,
    /// Device nodes made available in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_specs: Vec<DeviceNodeSpec>,
    /// Annotations for the container runtime.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The device plugins' fully qualified CDI device names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdi_devices: Vec<String>,
    /// The CDI device ids of the pod's DRA claims the container uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_cdi_devices: Vec<String>,
}

impl ContainerResources {
    /// Container `name` with `allocations` (its device allocations, one per
    /// resource, in resource order) merged and `claim_cdi_devices`.
    #[cfg(feature = "kube")]
    pub(crate) fn new(
        name: &str,
        kind: ContainerKind,
        allocations: &[&ContainerAllocation],
        claim_cdi_devices: Vec<String>,
    ) -> Self {
        let mut resources = Self {
            name: name.to_string(),
            kind,
            claim_cdi_devices,
            ..Self::default()
        };
        let mut device_paths = HashSet::new();
        let mut mount_paths = HashSet::new();
        let mut cdi = HashSet::new();
        for allocation in allocations {
            resources
                .devices
                .insert(allocation.resource.clone(), allocation.devices.clone());
            resources.numa.extend(
                allocation
                    .numa
                    .iter()
                    .map(|(id, n)| (id.clone(), n.clone())),
            );
            for (key, value) in &allocation.envs {
                resources
                    .envs
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
            for (key, value) in &allocation.annotations {
                resources
                    .annotations
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
            for spec in &allocation.device_specs {
                if device_paths.insert(spec.container_path.clone()) {
                    resources.device_specs.push(spec.clone());
                }
            }
            for mount in &allocation.mounts {
                if mount_paths.insert(mount.container_path.clone()) {
                    resources.mounts.push(mount.clone());
                }
            }
            for name in &allocation.cdi_devices {
                if cdi.insert(name.clone()) {
                    resources.cdi_devices.push(name.clone());
                }
            }
        }
        resources
    }

    /// Every CDI device the runtime is given: the device plugins', then
    /// the claims'.
    pub fn all_cdi_devices(&self) -> impl Iterator<Item = &String> {
        self.cdi_devices.iter().chain(&self.claim_cdi_devices)
    }
}

/// Each container of `pod` with the CDI ids of the devices it gets from
/// `results`: the devices of the claims it names, narrowed to the requests
/// it asks for ([`ClaimPod::serves`]).
#[cfg(feature = "kube")]
pub(crate) fn container_devices(
    pod: &PodClaims,
    results: &[PodClaimResult],
) -> Vec<ContainerDevices> {
    let users: BTreeMap<&str, &ClaimPod> = pod
        .claims
        .iter()
        .map(|c| (c.claim.uid.as_str(), &c.user))
        .collect();
    pod.containers
        .iter()
        .map(|container| {
            let mut seen = BTreeSet::new();
            let cdi_device_ids = results
                .iter()
                .filter_map(|r| Some((users.get(r.result.claim.uid.as_str())?, r)))
                .flat_map(|(user, r)| {
                    r.result
                        .devices
                        .iter()
                        .filter(move |d| user.serves(container, d))
                })
                .flat_map(|d| d.cdi_device_ids.iter())
                .filter(|id| seen.insert(id.as_str()))
                .cloned()
                .collect();
            ContainerDevices {
                name: container.clone(),
                cdi_device_ids,
            }
        })
        .collect()
}

#[cfg(all(test, feature = "kube"))]
mod tests;

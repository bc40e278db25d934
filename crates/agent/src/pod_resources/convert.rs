//! The kubelet's shapes of what the agent knows: `v1` and `v1alpha1`
//! messages from the device manager's allocations and allocatable devices
//! and the DRA manager's prepared claims.
//!
//! Per container, one `ContainerDevices` entry per device and NUMA node it
//! is attached to (one entry without topology when the plugin reported
//! none), and one `DynamicResource` per claim the container uses, with one
//! `ClaimResource` per device of the claim carrying that device's CDI
//! devices, from every driver that prepared the claim (sorted by driver).
//! A container that asks for some of a claim's requests only
//! (`resources.claims[].request`) lists the devices serving them: what its
//! runtime is given. (The kubelet of v1.37 lists the whole claim there.)
//! Containers are sorted by name, devices by resource and id, claims by
//! name. A pod known only by its UID (allocated before pods had names) is
//! named by its UID. CPU and memory fields stay empty: the agent manages
//! neither.

use std::collections::BTreeMap;
use std::sync::Arc;

use nodeplugins_api::podresources::{v1, v1alpha1};

use crate::device::{AllocatableDevice, ContainerAllocation};
use crate::dra::{ClaimPod, RecordedClaim};
use crate::pods::{ContainerKind, PodStatus};

/// `GetAllocatableResources`: every allocatable device, one entry per NUMA
/// node it is attached to.
pub(super) fn allocatable_resources(
    devices: &[AllocatableDevice],
) -> v1::AllocatableResourcesResponse {
    v1::AllocatableResourcesResponse {
        devices: devices.iter().flat_map(allocatable_entries).collect(),
        ..Default::default()
    }
}

/// Pod `uid`, from the device `allocations` and DRA `claims` it holds.
pub(super) fn pod_resources(
    uid: &str,
    allocations: &[Arc<ContainerAllocation>],
    claims: &[Arc<RecordedClaim>],
) -> v1::PodResources {
    // The pod's name from its devices, else from its claims, else its UID.
    let named = allocations
        .iter()
        .find(|a| !a.pod_name.is_empty())
        .map(|a| (a.pod_namespace.as_str(), a.pod_name.as_str()));
    let claimed = || {
        claims.iter().find_map(|c| {
            let user = c.pods.iter().find(|p| p.uid == uid && !p.name.is_empty())?;
            Some((c.claim.namespace.as_str(), user.name.as_str()))
        })
    };
    let (namespace, name) = named.or_else(claimed).unwrap_or(("", uid));
    v1::PodResources {
        name: name.to_string(),
        namespace: namespace.to_string(),
        containers: container_entries(uid, allocations, claims)
            .into_iter()
            .map(|(name, c)| container_resources(name, c))
            .collect(),
        ..Default::default()
    }
}

/// Admitted pod `pod`, from the device `allocations` and DRA `claims` it
/// holds, as the kubelet lists a pod it runs: its restartable init
/// containers and its app containers, in spec order, each with its devices
/// and claims (none, for a container that asked for nothing).
pub(super) fn admitted_pod_resources(
    pod: &PodStatus,
    allocations: &[Arc<ContainerAllocation>],
    claims: &[Arc<RecordedClaim>],
) -> v1::PodResources {
    let mut entries = container_entries(&pod.pod.uid, allocations, claims);
    v1::PodResources {
        name: pod.pod.name.clone(),
        namespace: pod.pod.namespace.clone(),
        containers: pod
            .containers
            .iter()
            .filter(|c| c.kind != ContainerKind::Init)
            .map(|c| {
                let entry = entries.remove(c.name.as_str()).unwrap_or_default();
                container_resources(&c.name, entry)
            })
            .collect(),
        ..Default::default()
    }
}

/// Each container of pod `uid` that holds devices or uses claims, by name.
fn container_entries<'a>(
    uid: &str,
    allocations: &'a [Arc<ContainerAllocation>],
    claims: &'a [Arc<RecordedClaim>],
) -> BTreeMap<&'a str, ContainerEntry<'a>> {
    let mut containers: BTreeMap<&str, ContainerEntry> = BTreeMap::new();
    for allocation in allocations {
        let container = containers.entry(&allocation.container).or_default();
        add_devices(&mut container.devices, allocation);
    }
    for claim in claims {
        for user in claim.pods.iter().filter(|p| p.uid == uid) {
            for name in &user.containers {
                let container = containers.entry(name).or_default();
                let key = (claim.claim.name.as_str(), claim.claim.uid.as_str());
                container.claims.entry(key).or_default().push((claim, user));
            }
        }
    }
    containers
}

/// Container `name`'s answer.
fn container_resources(name: &str, entry: ContainerEntry) -> v1::ContainerResources {
    v1::ContainerResources {
        name: name.to_string(),
        devices: entry.devices.into_values().collect(),
        dynamic_resources: entry
            .claims
            .into_values()
            .filter_map(|records| dynamic_resource(name, records))
            .collect(),
        ..Default::default()
    }
}

/// One container while its pod is built.
#[derive(Default)]
struct ContainerEntry<'a> {
    /// (resource, device, NUMA node or -1) → entry.
    devices: BTreeMap<(&'a str, &'a str, i64), v1::ContainerDevices>,
    /// (claim name, UID) → what each driver prepared of it, and how the
    /// pod uses it.
    claims: BTreeMap<(&'a str, &'a str), Vec<(&'a RecordedClaim, &'a ClaimPod)>>,
}

/// The v1alpha1 shape of `pod`: devices per container only.
pub(super) fn v1alpha1_pod(pod: &v1::PodResources) -> v1alpha1::PodResources {
    v1alpha1::PodResources {
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        containers: pod
            .containers
            .iter()
            .map(|c| v1alpha1::ContainerResources {
                name: c.name.clone(),
                devices: c
                    .devices
                    .iter()
                    .map(|d| v1alpha1::ContainerDevices {
                        resource_name: d.resource_name.clone(),
                        device_ids: d.device_ids.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// One entry per device and NUMA node.
fn add_devices<'a>(
    into: &mut BTreeMap<(&'a str, &'a str, i64), v1::ContainerDevices>,
    allocation: &'a ContainerAllocation,
) {
    for id in &allocation.devices {
        let numa = allocation.numa.get(id).map(Vec::as_slice).unwrap_or(&[]);
        for (node, entry) in device_entries(&allocation.resource, id, numa) {
            into.insert((&allocation.resource, id, node), entry);
        }
    }
}

/// The entries of device `id` of `resource` attached to `numa`: one per
/// node, or one without topology.
fn device_entries(resource: &str, id: &str, numa: &[i64]) -> Vec<(i64, v1::ContainerDevices)> {
    let entry = |topology| v1::ContainerDevices {
        resource_name: resource.to_string(),
        device_ids: vec![id.to_string()],
        topology,
    };
    if numa.is_empty() {
        return vec![(-1, entry(None))];
    }
    numa.iter()
        .map(|&node| {
            let topology = v1::TopologyInfo {
                nodes: vec![v1::NumaNode { id: node }],
            };
            (node, entry(Some(topology)))
        })
        .collect()
}

fn allocatable_entries(device: &AllocatableDevice) -> Vec<v1::ContainerDevices> {
    device_entries(&device.resource, &device.id, &device.numa)
        .into_iter()
        .map(|(_, entry)| entry)
        .collect()
}

/// One claim, with the devices of every driver that prepared it (`records`)
/// that `container` gets (all of them, unless it asks for some of the
/// claim's requests only), as upstream lists them under the claim: by
/// driver, each driver's in the order it gave them; `None` for no records.
fn dynamic_resource(
    container: &str,
    mut records: Vec<(&RecordedClaim, &ClaimPod)>,
) -> Option<v1::DynamicResource> {
    records.sort_by(|a, b| a.0.driver.cmp(&b.0.driver));
    let first = records.first()?.0;
    Some(v1::DynamicResource {
        claim_name: first.claim.name.clone(),
        claim_namespace: first.claim.namespace.clone(),
        claim_resources: records
            .iter()
            .flat_map(|(record, user)| {
                record
                    .devices
                    .iter()
                    .filter(move |d| user.serves(container, d))
                    .map(move |d| (record, d))
            })
            .map(|(record, d)| v1::ClaimResource {
                cdi_devices: d
                    .cdi_device_ids
                    .iter()
                    .map(|name| v1::CdiDevice { name: name.clone() })
                    .collect(),
                driver_name: record.driver.clone(),
                pool_name: d.pool.clone(),
                device_name: d.device.clone(),
                share_id: d.share_id.clone(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::ClaimPod;
    use crate::pod_resources::fixtures::{allocation, claim};

    fn ids(devices: &[v1::ContainerDevices]) -> Vec<(String, Vec<i64>)> {
        devices
            .iter()
            .map(|d| {
                let nodes = d
                    .topology
                    .as_ref()
                    .map_or(Vec::new(), |t| t.nodes.iter().map(|n| n.id).collect());
                (d.device_ids.join(","), nodes)
            })
            .collect()
    }

    #[test]
    fn devices_and_claims_per_container_shaped_as_the_kubelet_does() {
        let allocations: Vec<Arc<ContainerAllocation>> = vec![
            allocation(
                ("u1", "ml", "train"),
                "main",
                "example.com/nic",
                &[("nic-0", &[])],
            ),
            allocation(
                ("u1", "ml", "train"),
                "main",
                "example.com/fpga",
                &[("f-1", &[1]), ("f-0", &[0, 1])],
            ),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let pod = ClaimPod::new("u1", "train", vec!["main".into(), "sidecar".into()]);
        let claims = [claim("gpus", vec![pod])].map(Arc::new);
        let train = pod_resources("u1", &allocations, &claims);
        assert_eq!(
            (train.namespace.as_str(), train.name.as_str()),
            ("ml", "train")
        );
        let containers: Vec<&str> = train.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(containers, ["main", "sidecar"]);
        let main = &train.containers[0];
        assert_eq!(
            ids(&main.devices),
            [
                ("f-0".to_string(), vec![0]),
                ("f-0".to_string(), vec![1]),
                ("f-1".to_string(), vec![1]),
                ("nic-0".to_string(), vec![]),
            ],
            "one entry per device and NUMA node"
        );
        assert_eq!(main.dynamic_resources.len(), 1);
        let gpus = &main.dynamic_resources[0];
        assert_eq!(
            (gpus.claim_name.as_str(), gpus.claim_namespace.as_str()),
            ("gpus", "ml")
        );
        let cdi: Vec<Vec<&str>> = gpus
            .claim_resources
            .iter()
            .map(|r| r.cdi_devices.iter().map(|c| c.name.as_str()).collect())
            .collect();
        assert_eq!(
            cdi,
            [
                vec!["gpu.example.com/gpu=gpu-0"],
                vec!["gpu.example.com/gpu=gpu-1"]
            ],
            "each device carries its own CDI devices"
        );
        assert_eq!(gpus.claim_resources[1].driver_name, "gpu.example.com");
        assert_eq!(gpus.claim_resources[1].pool_name, "node-1");
        assert!(train.containers[1].devices.is_empty());
        assert_eq!(train.containers[1].dynamic_resources.len(), 1);

        let alpha = v1alpha1_pod(&train);
        assert_eq!(alpha.containers[0].devices.len(), 4);
        assert_eq!(
            alpha.containers[0].devices[3].resource_name,
            "example.com/nic"
        );

        let unnamed = [Arc::new(allocation(
            ("u0", "", ""),
            "c",
            "example.com/nic",
            &[("nic-1", &[])],
        ))];
        let unnamed = pod_resources("u0", &unnamed, &[]);
        assert_eq!(
            (unnamed.namespace.as_str(), unnamed.name.as_str()),
            ("", "u0"),
            "an unnamed pod is named by its UID"
        );
    }

    #[test]
    fn allocatable_devices_get_an_entry_per_numa_node() {
        let devices = [AllocatableDevice {
            resource: "example.com/fpga".into(),
            id: "f-2".into(),
            numa: vec![0, 1],
        }];
        assert_eq!(
            ids(&allocatable_resources(&devices).devices),
            [("f-2".to_string(), vec![0]), ("f-2".to_string(), vec![1])]
        );
    }

    #[test]
    fn a_claim_prepared_by_two_drivers_is_one_dynamic_resource_with_every_drivers_devices() {
        let pod = ClaimPod::new("u1", "train", vec!["main".into()]);
        let gpus = claim("mixed", vec![pod.clone()]);
        let mut nics = claim("mixed", vec![pod]);
        nics.driver = "nic.example.com".into();
        nics.devices.truncate(1);
        nics.devices[0].device = "nic-0".into();
        // Given in either order, the answer is the same.
        for claims in [
            [gpus.clone(), nics.clone()].map(Arc::new),
            [nics.clone(), gpus.clone()].map(Arc::new),
        ] {
            let pod = pod_resources("u1", &[], &claims);
            let main = &pod.containers[0];
            assert_eq!(main.dynamic_resources.len(), 1, "one entry per claim");
            let mixed = &main.dynamic_resources[0];
            assert_eq!(
                (mixed.claim_name.as_str(), mixed.claim_namespace.as_str()),
                ("mixed", "ml")
            );
            let devices: Vec<(&str, &str)> = mixed
                .claim_resources
                .iter()
                .map(|r| (r.driver_name.as_str(), r.device_name.as_str()))
                .collect();
            assert_eq!(
                devices,
                [
                    ("gpu.example.com", "gpu-0"),
                    ("gpu.example.com", "gpu-1"),
                    ("nic.example.com", "nic-0"),
                ]
            );
        }
    }
}

//! What the pod-resources API answers, built from the device manager's
//! allocations and allocatable devices and the DRA manager's prepared claims.
//!
//! Shaped as the kubelet shapes it: per container, one `ContainerDevices`
//! entry per device and NUMA node it is attached to (one entry without
//! topology when the plugin reported none), and one `DynamicResource` per
//! claim the container uses, with one `ClaimResource` per device of the
//! claim carrying that device's CDI devices, from every driver that
//! prepared the claim (sorted by driver). Pods are sorted by namespace and
//! name, containers by name, devices by resource and id, claims by name. A
//! pod known only by its UID (allocated before pods had names) is named by
//! its UID. CPU and memory fields stay empty: the agent manages neither.
//!
//! Every answer is encoded once and served as bytes. Each pod is encoded
//! on its own and kept until its allocations or claims change (the managers
//! share them, so a pointer comparison tells), so a change re-encodes the
//! pods it touches and the `List` answer is the others' bytes put together.
//! `Get` needs no encoding of its own: a pod's element in the encoded
//! `List` (field 1, length, message) is exactly the encoded
//! `GetPodResourcesResponse`, whose field 1 is the pod.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use nodeplugins_api::podresources::{v1, v1alpha1};
use prost::Message;

use crate::device::{AllocatableDevice, ContainerAllocation};
use crate::dra::RecordedClaim;

/// The encoded answers of `List` (v1 and v1alpha1) and `Get`.
#[derive(Debug, Default)]
pub(crate) struct PodView {
    /// `ListPodResourcesResponse`: every pod, sorted by namespace and name.
    list: Bytes,
    /// (namespace, name, the pod's element in `list`), in the same order.
    index: Vec<(Arc<str>, Arc<str>, Range<usize>)>,
    /// The v1alpha1 `ListPodResourcesResponse`.
    list_v1alpha1: Bytes,
}

impl PodView {
    /// `List`, encoded.
    pub(crate) fn list(&self) -> Bytes {
        self.list.clone()
    }

    /// `Get` of the pod `namespace/name`, encoded, if the pod is known.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Bytes> {
        let found = self
            .index
            .binary_search_by(|(ns, n, _)| (&**ns, &**n).cmp(&(namespace, name)))
            .ok()?;
        let (_, _, range) = self.index.get(found)?;
        Some(self.list.slice(range.clone()))
    }

    /// `List` of v1alpha1 (devices per container only), encoded.
    pub(crate) fn list_v1alpha1(&self) -> Bytes {
        self.list_v1alpha1.clone()
    }
}

/// What one pod's answer is made of, shared with the managers.
#[derive(Default)]
struct PodInputs {
    allocations: Vec<Arc<ContainerAllocation>>,
    claims: Vec<Arc<RecordedClaim>>,
}

impl PodInputs {
    fn is(&self, allocations: &[Arc<ContainerAllocation>], claims: &[&Arc<RecordedClaim>]) -> bool {
        self.allocations.len() == allocations.len()
            && self.claims.len() == claims.len()
            && self
                .allocations
                .iter()
                .zip(allocations)
                .all(|(a, b)| Arc::ptr_eq(a, b))
            && self
                .claims
                .iter()
                .zip(claims)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// One pod's answer, encoded as an element of field 1.
struct PodAnswer {
    inputs: PodInputs,
    namespace: Arc<str>,
    name: Arc<str>,
    v1: Bytes,
    v1alpha1: Bytes,
    /// The view that last saw the pod.
    seen: u64,
}

/// Each pod's encoded answer, kept between views.
#[derive(Default)]
pub(crate) struct PodCache {
    /// Pod UID → its answer.
    pods: HashMap<String, PodAnswer>,
    /// Views built so far.
    views: u64,
}

impl PodCache {
    /// The view of `allocations` (sorted by pod UID, as the device manager
    /// gives them) and `claims`, encoding again only the pods whose inputs
    /// changed since the last view.
    pub(crate) fn view<'a>(
        &mut self,
        allocations: &[Arc<ContainerAllocation>],
        claims: impl IntoIterator<Item = &'a Arc<RecordedClaim>>,
    ) -> PodView {
        self.views += 1;
        let mut claimed: HashMap<&str, Vec<&Arc<RecordedClaim>>> = HashMap::new();
        for claim in claims {
            for user in &claim.pods {
                claimed.entry(&user.uid).or_default().push(claim);
            }
        }
        for run in allocations.chunk_by(|a, b| a.pod_uid == b.pod_uid) {
            if let Some(first) = run.first() {
                let uid = first.pod_uid.as_str();
                let claims = claimed.remove(uid).unwrap_or_default();
                self.refresh(uid, run, &claims);
            }
        }
        for (uid, claims) in claimed {
            self.refresh(uid, &[], &claims);
        }
        let views = self.views;
        self.pods.retain(|_, pod| pod.seen == views);

        let mut sorted: Vec<&PodAnswer> = self.pods.values().collect();
        sorted.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut list = BytesMut::with_capacity(sorted.iter().map(|p| p.v1.len()).sum());
        let mut list_v1alpha1 =
            BytesMut::with_capacity(sorted.iter().map(|p| p.v1alpha1.len()).sum());
        let mut index = Vec::with_capacity(sorted.len());
        for pod in sorted {
            let start = list.len();
            list.extend_from_slice(&pod.v1);
            index.push((pod.namespace.clone(), pod.name.clone(), start..list.len()));
            list_v1alpha1.extend_from_slice(&pod.v1alpha1);
        }
        PodView {
            list: list.freeze(),
            index,
            list_v1alpha1: list_v1alpha1.freeze(),
        }
    }

    /// Keeps the answer of pod `uid` if it was built from the same inputs,
    /// else encodes it again.
    fn refresh(
        &mut self,
        uid: &str,
        allocations: &[Arc<ContainerAllocation>],
        claims: &[&Arc<RecordedClaim>],
    ) {
        if let Some(known) = self.pods.get_mut(uid)
            && known.inputs.is(allocations, claims)
        {
            known.seen = self.views;
            return;
        }
        let inputs = PodInputs {
            allocations: allocations.to_vec(),
            claims: claims.iter().map(|c| Arc::clone(c)).collect(),
        };
        let pod = pod_resources(uid, &inputs);
        let answer = PodAnswer {
            v1: element(&pod),
            v1alpha1: element(&v1alpha1_pod(&pod)),
            namespace: pod.namespace.into(),
            name: pod.name.into(),
            inputs,
            seen: self.views,
        };
        self.pods.insert(uid.to_string(), answer);
    }
}

/// `message` as field 1 of its parent: key, length, body.
fn element(message: &impl Message) -> Bytes {
    let mut buf = BytesMut::with_capacity(message.encoded_len() + 6);
    prost::encoding::message::encode(1, message, &mut buf);
    buf.freeze()
}

/// `GetAllocatableResources`, encoded.
pub(crate) fn allocatable(devices: &[AllocatableDevice]) -> Bytes {
    let answer = v1::AllocatableResourcesResponse {
        devices: devices.iter().flat_map(allocatable_entries).collect(),
        ..Default::default()
    };
    answer.encode_to_vec().into()
}

/// One pod, from what it holds.
fn pod_resources(uid: &str, inputs: &PodInputs) -> v1::PodResources {
    // The pod's name from its devices, else from its claims, else its UID.
    let named = inputs
        .allocations
        .iter()
        .find(|a| !a.pod_name.is_empty())
        .map(|a| (a.pod_namespace.as_str(), a.pod_name.as_str()));
    let claimed = || {
        inputs.claims.iter().find_map(|c| {
            let user = c.pods.iter().find(|p| p.uid == uid && !p.name.is_empty())?;
            Some((c.claim.namespace.as_str(), user.name.as_str()))
        })
    };
    let (namespace, name) = named.or_else(claimed).unwrap_or(("", uid));
    let mut containers: BTreeMap<&str, ContainerEntry> = BTreeMap::new();
    for allocation in &inputs.allocations {
        let container = containers.entry(&allocation.container).or_default();
        add_devices(&mut container.devices, allocation);
    }
    for claim in &inputs.claims {
        for user in claim.pods.iter().filter(|p| p.uid == uid) {
            for name in &user.containers {
                let container = containers.entry(name).or_default();
                let key = (claim.claim.name.as_str(), claim.claim.uid.as_str());
                container.claims.entry(key).or_default().push(claim);
            }
        }
    }
    v1::PodResources {
        name: name.to_string(),
        namespace: namespace.to_string(),
        containers: containers
            .into_iter()
            .map(|(name, c)| v1::ContainerResources {
                name: name.to_string(),
                devices: c.devices.into_values().collect(),
                dynamic_resources: c
                    .claims
                    .into_values()
                    .filter_map(dynamic_resource)
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// One container while its pod is built.
#[derive(Default)]
struct ContainerEntry<'a> {
    /// (resource, device, NUMA node or -1) → entry.
    devices: BTreeMap<(&'a str, &'a str, i64), v1::ContainerDevices>,
    /// (claim name, UID) → what each driver prepared of it.
    claims: BTreeMap<(&'a str, &'a str), Vec<&'a RecordedClaim>>,
}

fn v1alpha1_pod(pod: &v1::PodResources) -> v1alpha1::PodResources {
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
/// as upstream lists them under the claim: by driver, each driver's in the
/// order it gave them; `None` for no records.
fn dynamic_resource(mut records: Vec<&RecordedClaim>) -> Option<v1::DynamicResource> {
    records.sort_by(|a, b| a.driver.cmp(&b.driver));
    let first = records.first()?;
    Some(v1::DynamicResource {
        claim_name: first.claim.name.clone(),
        claim_namespace: first.claim.namespace.clone(),
        claim_resources: records
            .iter()
            .flat_map(|record| record.devices.iter().map(move |d| (record, d)))
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
    use crate::dra::{ClaimPod, ClaimRef, PreparedDevice};

    fn allocation(
        pod: (&str, &str, &str),
        container: &str,
        resource: &str,
        devices: &[(&str, &[i64])],
    ) -> ContainerAllocation {
        ContainerAllocation {
            pod_uid: pod.0.into(),
            pod_namespace: pod.1.into(),
            pod_name: pod.2.into(),
            container: container.into(),
            resource: resource.into(),
            devices: devices.iter().map(|(id, _)| id.to_string()).collect(),
            envs: BTreeMap::new(),
            mounts: Vec::new(),
            device_specs: Vec::new(),
            annotations: BTreeMap::new(),
            cdi_devices: Vec::new(),
            numa: devices
                .iter()
                .filter(|(_, numa)| !numa.is_empty())
                .map(|(id, numa)| (id.to_string(), numa.to_vec()))
                .collect(),
        }
    }

    fn claim(name: &str, pods: Vec<ClaimPod>) -> RecordedClaim {
        RecordedClaim {
            driver: "gpu.example.com".into(),
            claim: ClaimRef {
                namespace: "ml".into(),
                name: name.into(),
                uid: format!("{name}-uid"),
            },
            devices: ["gpu-0", "gpu-1"]
                .iter()
                .map(|d| PreparedDevice {
                    request_names: vec!["gpus".into()],
                    pool: "node-1".into(),
                    device: d.to_string(),
                    cdi_device_ids: vec![format!("gpu.example.com/gpu={d}")],
                    share_id: None,
                })
                .collect(),
            prepared_at_unix_ms: 0,
            pods,
        }
    }

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
            allocation(("u0", "", ""), "c", "example.com/nic", &[("nic-1", &[])]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let pod = ClaimPod {
            uid: "u1".into(),
            name: "train".into(),
            containers: vec!["main".into(), "sidecar".into()],
        };
        let claims = [claim("gpus", vec![pod]), claim("idle", vec![])].map(Arc::new);
        let mut cache = PodCache::default();
        let view = cache.view(&allocations, &claims);
        let get = |namespace: &str, name: &str| {
            let answer = v1::GetPodResourcesResponse::decode(view.get(namespace, name)?).unwrap();
            answer.pod_resources
        };

        let list = v1::ListPodResourcesResponse::decode(view.list())
            .unwrap()
            .pod_resources;
        let names: Vec<(&str, &str)> = list
            .iter()
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [("", "u0"), ("ml", "train")],
            "an unnamed pod is named by its UID"
        );

        let train = get("ml", "train").unwrap();
        assert_eq!(train, list[1], "Get answers with the pod's part of List");
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
        assert!(get("ml", "missing").is_none());

        let devices = [AllocatableDevice {
            resource: "example.com/fpga".into(),
            id: "f-2".into(),
            numa: vec![0, 1],
        }];
        let allocatable = v1::AllocatableResourcesResponse::decode(allocatable(&devices)).unwrap();
        assert_eq!(
            ids(&allocatable.devices),
            [("f-2".to_string(), vec![0]), ("f-2".to_string(), vec![1])]
        );
        let alpha = v1alpha1::ListPodResourcesResponse::decode(view.list_v1alpha1())
            .unwrap()
            .pod_resources;
        assert_eq!(alpha[1].containers[0].devices.len(), 4);
        assert_eq!(
            alpha[1].containers[0].devices[3].resource_name,
            "example.com/nic"
        );
    }

    #[test]
    fn a_claim_prepared_by_two_drivers_is_one_dynamic_resource_with_every_drivers_devices() {
        let pod = ClaimPod {
            uid: "u1".into(),
            name: "train".into(),
            containers: vec!["main".into()],
        };
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
            let view = PodCache::default().view(&[], &claims);
            let list = v1::ListPodResourcesResponse::decode(view.list()).unwrap();
            let main = &list.pod_resources[0].containers[0];
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

    #[test]
    fn a_change_encodes_again_only_the_pods_it_touches() {
        let a = Arc::new(allocation(
            ("ua", "ns", "a"),
            "c",
            "example.com/x",
            &[("x-0", &[0])],
        ));
        let b = Arc::new(allocation(
            ("ub", "ns", "b"),
            "c",
            "example.com/x",
            &[("x-1", &[1])],
        ));
        let mut cache = PodCache::default();
        let first = cache.view(&[a.clone(), b.clone()], &[]);
        let a_bytes = cache.pods["ua"].v1.clone();
        let b_bytes = cache.pods["ub"].v1.clone();

        // b gets another device; a is untouched.
        let b2 = Arc::new(allocation(
            ("ub", "ns", "b"),
            "d",
            "example.com/x",
            &[("x-2", &[])],
        ));
        let second = cache.view(&[a.clone(), b.clone(), b2], &[]);
        assert_eq!(cache.pods["ua"].v1.as_ptr(), a_bytes.as_ptr(), "a kept");
        assert_ne!(cache.pods["ub"].v1, b_bytes, "b encoded again");
        let list = v1::ListPodResourcesResponse::decode(second.list()).unwrap();
        assert_eq!(list.pod_resources[1].containers.len(), 2);
        assert_eq!(first.get("ns", "a"), second.get("ns", "a"));

        // b goes away.
        let third = cache.view(&[a], &[]);
        assert!(third.get("ns", "b").is_none());
        assert_eq!(cache.pods.len(), 1);
    }
}

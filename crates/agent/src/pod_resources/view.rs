//! The pod-resources answers, encoded: each pod's answer (shaped by
//! [`super::convert`]) kept between views, and the `List` and `Get`
//! answers made of them.
//!
//! Pods are sorted by namespace and name. Every answer is encoded once and
//! served as bytes. Each pod is encoded on its own and kept until its
//! allocations or claims change (the managers share them, so a pointer
//! comparison tells), so a change re-encodes the pods it touches and the
//! `List` answer is the others' bytes put together.
//! `Get` needs no encoding of its own: a pod's element in the encoded
//! `List` (field 1, length, message) is exactly the encoded
//! `GetPodResourcesResponse`, whose field 1 is the pod.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prost::Message;

use super::convert::{admitted_pod_resources, allocatable_resources, pod_resources, v1alpha1_pod};
use crate::device::{AllocatableDevice, ContainerAllocation};
use crate::dra::RecordedClaim;
use crate::pods::{PodStatus, PodsSnapshot};

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
    /// The pod as the pods owner admitted it, when pods are served.
    admitted: Option<Arc<PodStatus>>,
}

impl PodInputs {
    fn is(
        &self,
        allocations: &[Arc<ContainerAllocation>],
        claims: &[&Arc<RecordedClaim>],
        admitted: Option<&Arc<PodStatus>>,
    ) -> bool {
        let same_pod = match (&self.admitted, admitted) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        same_pod
            && self.allocations.len() == allocations.len()
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
    /// gives them) and `claims` (those prepared), encoding again only the
    /// pods whose inputs changed since the last view. With `admitted` (pods
    /// served from the API), exactly the admitted pods, each with every
    /// container the kubelet lists; without, every pod that holds devices
    /// or prepared claims.
    pub(crate) fn view<'a>(
        &mut self,
        allocations: &[Arc<ContainerAllocation>],
        claims: impl IntoIterator<Item = &'a Arc<RecordedClaim>>,
        admitted: Option<&PodsSnapshot>,
    ) -> PodView {
        self.views += 1;
        let mut claimed: HashMap<&str, Vec<&Arc<RecordedClaim>>> = HashMap::new();
        for claim in claims.into_iter().filter(|c| c.prepared) {
            for user in &claim.pods {
                claimed.entry(&user.uid).or_default().push(claim);
            }
        }
        let mut by_pod: HashMap<&str, &[Arc<ContainerAllocation>]> = HashMap::new();
        for run in allocations.chunk_by(|a, b| a.pod_uid == b.pod_uid) {
            if let Some(first) = run.first() {
                by_pod.insert(first.pod_uid.as_str(), run);
            }
        }
        match admitted {
            Some(pods) => {
                for pod in pods.admitted() {
                    let uid = pod.pod.uid.as_str();
                    let held = by_pod.get(uid).copied().unwrap_or_default();
                    let claims = claimed.remove(uid).unwrap_or_default();
                    self.refresh(uid, held, &claims, Some(pod));
                }
            }
            None => {
                for (uid, held) in by_pod {
                    let claims = claimed.remove(uid).unwrap_or_default();
                    self.refresh(uid, held, &claims, None);
                }
                for (uid, claims) in claimed {
                    self.refresh(uid, &[], &claims, None);
                }
            }
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
        admitted: Option<&Arc<PodStatus>>,
    ) {
        if let Some(known) = self.pods.get_mut(uid)
            && known.inputs.is(allocations, claims, admitted)
        {
            known.seen = self.views;
            return;
        }
        let inputs = PodInputs {
            allocations: allocations.to_vec(),
            claims: claims.iter().map(|c| Arc::clone(c)).collect(),
            admitted: admitted.cloned(),
        };
        let pod = match &inputs.admitted {
            Some(admitted) => admitted_pod_resources(admitted, &inputs.allocations, &inputs.claims),
            None => pod_resources(uid, &inputs.allocations, &inputs.claims),
        };
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
    allocatable_resources(devices).encode_to_vec().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::ClaimPod;
    use crate::pod_resources::fixtures::{allocation, claim};
    use crate::pods::{ContainerKind, ContainerResources, PodPhase, PodRef};
    use nodeplugins_api::podresources::{v1, v1alpha1};

    #[test]
    fn list_sorts_pods_by_namespace_and_name_and_get_answers_with_a_pods_part_of_it() {
        let allocations: Vec<Arc<ContainerAllocation>> = vec![
            allocation(
                ("u2", "ml", "train"),
                "main",
                "example.com/nic",
                &[("nic-0", &[])],
            ),
            allocation(("u0", "", ""), "c", "example.com/nic", &[("nic-1", &[])]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let serve = ClaimPod::new("u1", "serve", vec!["main".into()]);
        let claims = [claim("gpus", vec![serve])].map(Arc::new);
        let view = PodCache::default().view(&allocations, &claims, None);
        let list = v1::ListPodResourcesResponse::decode(view.list())
            .unwrap()
            .pod_resources;
        let names: Vec<(&str, &str)> = list
            .iter()
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [("", "u0"), ("ml", "serve"), ("ml", "train")],
            "pods from devices and from claims alike"
        );
        for (namespace, name, pod) in [
            ("", "u0", &list[0]),
            ("ml", "serve", &list[1]),
            ("ml", "train", &list[2]),
        ] {
            let got =
                v1::GetPodResourcesResponse::decode(view.get(namespace, name).unwrap()).unwrap();
            assert_eq!(got.pod_resources.as_ref(), Some(pod), "Get as List");
        }
        assert!(view.get("ml", "missing").is_none());
        let alpha = v1alpha1::ListPodResourcesResponse::decode(view.list_v1alpha1())
            .unwrap()
            .pod_resources;
        let names: Vec<&str> = alpha.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["u0", "serve", "train"]);
    }

    /// An admitted pod: UID, name, and its containers with their kinds.
    type Admitted<'a> = (&'a str, &'a str, &'a [(&'a str, ContainerKind)]);

    /// The pods owner's snapshot with `admitted` pods and one pod that
    /// waits.
    fn served(admitted: &[Admitted<'_>]) -> PodsSnapshot {
        let row = |uid: &str, name: &str, phase, containers: &[(&str, ContainerKind)]| {
            let status = PodStatus {
                pod: PodRef {
                    namespace: "ml".into(),
                    name: name.into(),
                    uid: uid.into(),
                },
                phase,
                reason: None,
                message: None,
                failures: 0,
                retry_at_unix_ms: None,
                seen_at_unix_us: 0,
                ready_at_unix_us: None,
                in_api: true,
                pod_phase: None,
                containers: containers
                    .iter()
                    .map(|(name, kind)| ContainerResources {
                        name: name.to_string(),
                        kind: *kind,
                        ..ContainerResources::default()
                    })
                    .collect(),
                volumes: Vec::new(),
            };
            (uid.to_string(), Arc::new(status))
        };
        let mut pods: std::collections::BTreeMap<String, Arc<PodStatus>> = admitted
            .iter()
            .map(|(uid, name, containers)| row(uid, name, PodPhase::Admitted, containers))
            .collect();
        let (uid, waiting) = row("u-wait", "waits", PodPhase::Waiting, &[]);
        pods.insert(uid, waiting);
        PodsSnapshot {
            running: true,
            listed: true,
            generation: 1,
            pods,
        }
    }

    #[test]
    fn with_pods_served_exactly_the_admitted_pods_are_listed_with_the_containers_the_kubelet_lists()
    {
        // u-wait holds a device (its admission is under way): not listed.
        // u-gone holds one too but is not admitted: not listed.
        let allocations: Vec<Arc<ContainerAllocation>> = [
            allocation(
                ("u-train", "ml", "train"),
                "main",
                "example.com/x",
                &[("x-0", &[0])],
            ),
            allocation(
                ("u-wait", "ml", "waits"),
                "main",
                "example.com/x",
                &[("x-1", &[])],
            ),
            allocation(
                ("u-gone", "ml", "gone"),
                "main",
                "example.com/x",
                &[("x-2", &[])],
            ),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let pods = served(&[
            (
                "u-train",
                "train",
                &[
                    ("setup", ContainerKind::Init),
                    ("proxy", ContainerKind::Sidecar),
                    ("main", ContainerKind::App),
                ],
            ),
            ("u-idle", "idle", &[("main", ContainerKind::App)]),
        ]);
        let mut pending = claim(
            "gpus",
            vec![ClaimPod::new("u-idle", "idle", vec!["main".into()])],
        );
        pending.prepared = false;
        let claims = [Arc::new(pending)];
        let view = PodCache::default().view(&allocations, &claims, Some(&pods));
        let list = v1::ListPodResourcesResponse::decode(view.list())
            .unwrap()
            .pod_resources;
        let listed: Vec<(&str, Vec<&str>)> = list
            .iter()
            .map(|p| {
                let containers = p.containers.iter().map(|c| c.name.as_str()).collect();
                (p.name.as_str(), containers)
            })
            .collect();
        assert_eq!(
            listed,
            [("idle", vec!["main"]), ("train", vec!["proxy", "main"])],
            "admitted pods only, a pod holding nothing too, init containers left out"
        );
        assert_eq!(list[1].containers[1].devices.len(), 1, "main's device");
        assert!(
            list[0].containers[0].dynamic_resources.is_empty(),
            "a claim not prepared yet is not shown"
        );
        assert!(view.get("ml", "waits").is_none());
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
        let first = cache.view(&[a.clone(), b.clone()], &[], None);
        let a_bytes = cache.pods["ua"].v1.clone();
        let b_bytes = cache.pods["ub"].v1.clone();

        // b gets another device; a is untouched.
        let b2 = Arc::new(allocation(
            ("ub", "ns", "b"),
            "d",
            "example.com/x",
            &[("x-2", &[])],
        ));
        let second = cache.view(&[a.clone(), b.clone(), b2], &[], None);
        assert_eq!(cache.pods["ua"].v1.as_ptr(), a_bytes.as_ptr(), "a kept");
        assert_ne!(cache.pods["ub"].v1, b_bytes, "b encoded again");
        let list = v1::ListPodResourcesResponse::decode(second.list()).unwrap();
        assert_eq!(list.pod_resources[1].containers.len(), 2);
        assert_eq!(first.get("ns", "a"), second.get("ns", "a"));

        // b goes away.
        let third = cache.view(&[a], &[], None);
        assert!(third.get("ns", "b").is_none());
        assert_eq!(cache.pods.len(), 1);
    }
}

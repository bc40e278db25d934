//! Pod-level DRA, as the kubelet's DRA manager does it: a pod's claims
//! (read from the API beforehand, see `kube_api::PodClaimsReader`) are
//! checked against what this node prepared, each driver is called once with
//! all its claims, and each container gets the CDI devices of the claims it
//! names (`resources.claims`), narrowed to the requests it asks for.
//!
//! A claim several pods use is prepared once and unprepared when the last
//! of them goes; until then, unpreparing one pod only forgets that it used
//! the claim.

use std::collections::{BTreeMap, BTreeSet};

use super::checkpoint::ClaimPods;
use super::claim::{ClaimPod, ClaimRef, PreparedClaim};
use super::command::Command;
use super::error::DraError;
use super::handle::DraHandle;

/// A pod, by namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodRef {
    /// Namespace (its claims' too).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One claim of a pod, read from the API and checked: allocated, reserved
/// for the pod, and (from a template) created for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaim {
    /// The claim.
    pub claim: ClaimRef,
    /// The drivers of its allocation results, sorted, each once.
    pub drivers: Vec<String>,
    /// The pod's containers that use it, and the requests they ask for.
    pub user: ClaimPod,
}

/// Everything preparing a pod needs, read before any driver is called.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaims {
    /// The pod.
    pub pod: PodRef,
    /// Its containers, init containers first: the answer lists each.
    pub containers: Vec<String>,
    /// Its claims, in `spec.resourceClaims` order (entries that need no
    /// claim left out).
    pub claims: Vec<PodClaim>,
}

/// What one driver did with one claim of a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaimResult {
    /// The driver.
    pub driver: String,
    /// The claim, its devices from this driver, or why it failed.
    #[serde(flatten)]
    pub result: PreparedClaim,
}

/// One container's devices.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerDevices {
    /// The container.
    pub name: String,
    /// The CDI device ids the container runtime is given, by the pod's
    /// claim order, then driver, then as the driver listed them.
    pub cdi_device_ids: Vec<String>,
}

/// The outcome of preparing a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedPod {
    /// The pod.
    pub pod: PodRef,
    /// One result per claim and driver, in claim order, then driver.
    pub claims: Vec<PodClaimResult>,
    /// Every container with its devices; empty when any claim failed.
    pub containers: Vec<ContainerDevices>,
}

impl PreparedPod {
    /// Whether any claim failed.
    pub fn failed(&self) -> bool {
        self.claims.iter().any(|c| c.result.error.is_some())
    }
}

/// What unpreparing a pod did with one of its claims.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaimUnprepared {
    /// The claim.
    pub claim: ClaimRef,
    /// The drivers that prepared it.
    pub drivers: Vec<String>,
    /// Whether the drivers were asked to unprepare it: not while other
    /// pods still use it.
    pub unprepared: bool,
    /// Why it failed, if it did: it stays recorded for the pod, so that
    /// unpreparing the pod again tries again.
    pub error: Option<String>,
}

/// The outcome of unpreparing a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnpreparedPod {
    /// The pod's UID, when any claim records it.
    pub pod_uid: Option<String>,
    /// The claims it used, by claim UID.
    pub claims: Vec<PodClaimUnprepared>,
}

impl UnpreparedPod {
    /// Whether any claim failed.
    pub fn failed(&self) -> bool {
        self.claims.iter().any(|c| c.error.is_some())
    }
}

impl DraHandle {
    /// Prepares a pod's claims: refuses (before calling any driver) a claim
    /// replaced by another of the same name while the old one is still
    /// prepared here, a pod recorded under another name, and a driver that
    /// is not registered; then calls each driver once with all its claims
    /// and records the pod as using them from its containers.
    pub async fn prepare_pod(&self, pod: &PodClaims) -> Result<PreparedPod, DraError> {
        let recorded = self.loaded_claims().await.map_err(|_| DraError::Stopping)?;
        for claim in &pod.claims {
            let c = &claim.claim;
            if let Some(old) = recorded.by_name(&c.namespace, &c.name)
                && old.claim.uid != c.uid
            {
                return Err(DraError::ClaimReplaced {
                    claim: format!("{}/{}", c.namespace, c.name),
                    prepared_uid: old.claim.uid.clone(),
                    uid: c.uid.clone(),
                });
            }
            if let Some(conflict) = recorded.pod_name_conflict(&claim.user, &c.namespace) {
                return Err(DraError::PodRenamed {
                    pod: pod.pod.uid.clone(),
                    known: conflict.known,
                    given: conflict.given,
                });
            }
        }
        drop(recorded);
        let mut batches: BTreeMap<&str, (Vec<ClaimRef>, ClaimPods)> = BTreeMap::new();
        for claim in &pod.claims {
            for driver in &claim.drivers {
                let (claims, pods) = batches.entry(driver).or_default();
                claims.push(claim.claim.clone());
                pods.insert(claim.claim.uid.clone(), claim.user.clone());
            }
        }
        for driver in batches.keys() {
            self.pick(driver)?;
        }
        // (claim UID, driver) → result.
        let mut results: BTreeMap<(String, String), PreparedClaim> = BTreeMap::new();
        for (driver, (claims, pods)) in &batches {
            match self.prepare_with_pods(driver, claims, pods).await {
                Ok(done) => {
                    for result in done {
                        results.insert((result.claim.uid.clone(), driver.to_string()), result);
                    }
                }
                Err(e) => {
                    for claim in claims {
                        let failed = PreparedClaim {
                            claim: claim.clone(),
                            devices: Vec::new(),
                            error: Some(e.to_string()),
                        };
                        results.insert((claim.uid.clone(), driver.to_string()), failed);
                    }
                }
            }
        }
        let claims: Vec<PodClaimResult> = pod
            .claims
            .iter()
            .flat_map(|claim| claim.drivers.iter().map(move |d| (claim, d)))
            .filter_map(|(claim, driver)| {
                let result = results.remove(&(claim.claim.uid.clone(), driver.clone()))?;
                Some(PodClaimResult {
                    driver: driver.clone(),
                    result,
                })
            })
            .collect();
        let failed = claims.iter().any(|c| c.result.error.is_some());
        let containers = if failed {
            Vec::new()
        } else {
            container_devices(pod, &claims)
        };
        Ok(PreparedPod {
            pod: pod.pod.clone(),
            claims,
            containers,
        })
    }

    /// Unprepares what pod `uid` uses, as recorded (`None`: the UID recorded
    /// for `namespace/name`, if any). A claim no other pod uses is
    /// unprepared by every driver that prepared it; one that others still
    /// use only forgets this pod. A pod with nothing recorded has nothing
    /// to unprepare.
    pub async fn unprepare_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<UnpreparedPod, DraError> {
        let recorded = self.loaded_claims().await.map_err(|_| DraError::Stopping)?;
        let Some(uid) = uid
            .or_else(|| recorded.pod_uid(namespace, name))
            .map(str::to_string)
        else {
            return Ok(UnpreparedPod {
                pod_uid: None,
                claims: Vec::new(),
            });
        };
        // Claim UID → (claim, drivers, whether another pod uses it).
        let mut used: BTreeMap<String, (ClaimRef, Vec<String>, bool)> = BTreeMap::new();
        for record in recorded.used_by(&uid) {
            let entry = used
                .entry(record.claim.uid.clone())
                .or_insert_with(|| (record.claim.clone(), Vec::new(), false));
            entry.1.push(record.driver.clone());
        }
        for (claim_uid, entry) in &mut used {
            entry.2 = recorded
                .drivers_of(claim_uid)
                .any(|r| r.pods.iter().any(|p| p.uid != uid));
        }
        drop(recorded);

        let mut batches: BTreeMap<&str, Vec<ClaimRef>> = BTreeMap::new();
        for (claim, drivers, shared) in used.values() {
            if !shared {
                for driver in drivers {
                    batches.entry(driver).or_default().push(claim.clone());
                }
            }
        }
        // Claim UID → why each driver that failed it did.
        let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (driver, claims) in &batches {
            match self.unprepare(driver, claims).await {
                Ok(done) => {
                    for result in done {
                        if let Some(error) = result.error {
                            let failed = failures.entry(result.claim.uid).or_default();
                            failed.push(format!("DRA driver {driver}: {error}"));
                        }
                    }
                }
                Err(e) => {
                    for claim in claims {
                        let failed = failures.entry(claim.uid.clone()).or_default();
                        failed.push(e.to_string());
                    }
                }
            }
        }
        let shared: Vec<String> = used
            .iter()
            .filter(|(_, (_, _, shared))| *shared)
            .map(|(claim_uid, _)| claim_uid.clone())
            .collect();
        if !shared.is_empty() {
            self.record(|reply| Command::PodReleased {
                pod_uid: uid.clone(),
                claim_uids: shared,
                reply,
            })
            .await;
        }
        let claims = used
            .into_iter()
            .map(|(claim_uid, (claim, drivers, shared))| PodClaimUnprepared {
                claim,
                drivers,
                unprepared: !shared,
                error: failures.get(&claim_uid).map(|f| f.join("; ")),
            })
            .collect();
        Ok(UnpreparedPod {
            pod_uid: Some(uid),
            claims,
        })
    }
}

/// Each container of `pod` with the CDI ids of the devices it gets from
/// `results`: the devices of the claims it names, narrowed to the requests
/// it asks for ([`ClaimPod::serves`]).
fn container_devices(pod: &PodClaims, results: &[PodClaimResult]) -> Vec<ContainerDevices> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::PreparedDevice;

    fn device(request: &str, name: &str) -> PreparedDevice {
        PreparedDevice {
            request_names: vec![request.into()],
            pool: "node-1".into(),
            device: name.into(),
            cdi_device_ids: vec![format!("dra.example.com/gpu={name}")],
            share_id: None,
        }
    }

    fn pod_with(user: ClaimPod) -> PodClaims {
        PodClaims {
            pod: PodRef {
                namespace: "default".into(),
                name: "train".into(),
                uid: "pod-1".into(),
            },
            containers: vec!["init".into(), "whole".into(), "one".into()],
            claims: vec![PodClaim {
                claim: ClaimRef {
                    namespace: "default".into(),
                    name: "gpus".into(),
                    uid: "claim-1".into(),
                },
                drivers: vec!["dra.example.com".into()],
                user,
            }],
        }
    }

    #[test]
    fn a_container_naming_a_request_gets_its_devices_and_those_of_its_subrequests() {
        let mut user = ClaimPod::new("pod-1", "train", vec!["whole".into(), "one".into()]);
        user.requests.insert("one".into(), vec!["gpu".into()]);
        let pod = pod_with(user);
        let result = PodClaimResult {
            driver: "dra.example.com".into(),
            result: PreparedClaim {
                claim: pod.claims[0].claim.clone(),
                devices: vec![
                    device("gpu/big", "gpu-0"),
                    device("gpu-extra", "gpu-1"),
                    device("extra", "gpu-2"),
                ],
                error: None,
            },
        };
        let containers = container_devices(&pod, &[result]);
        let ids = |i: usize| containers[i].cdi_device_ids.clone();
        assert!(ids(0).is_empty(), "the init container names no claim");
        assert_eq!(
            ids(1),
            [
                "dra.example.com/gpu=gpu-0",
                "dra.example.com/gpu=gpu-1",
                "dra.example.com/gpu=gpu-2"
            ]
        );
        assert_eq!(
            ids(2),
            ["dra.example.com/gpu=gpu-0"],
            "gpu/big serves gpu; gpu-extra is another request"
        );
    }

    #[test]
    fn merging_containers_keeps_whole_claims_whole() {
        let mut pod = ClaimPod::new("pod-1", "train", vec!["a".into()]);
        let mut narrow = ClaimPod::new("pod-1", "train", vec!["a".into(), "b".into()]);
        narrow.requests.insert("a".into(), vec!["gpu".into()]);
        narrow.requests.insert("b".into(), vec!["gpu".into()]);
        assert!(pod.merge(&narrow));
        assert_eq!(pod.containers, ["a", "b"]);
        assert!(!pod.requests.contains_key("a"), "a uses the whole claim");
        assert_eq!(pod.requests["b"], ["gpu"]);
        assert!(!pod.merge(&narrow), "nothing new");
        let whole_b = ClaimPod::new("pod-1", "train", vec!["b".into()]);
        assert!(pod.merge(&whole_b));
        assert!(pod.requests.is_empty());
    }
}

//! Reading a pod's DRA claims from the API, as the kubelet's DRA manager
//! does before it prepares a pod: each `spec.resourceClaims` entry resolves
//! to a ResourceClaim (named directly, or through
//! `status.resourceClaimStatuses` for one made from a template, which must
//! then be controlled by the pod), and each claim must be allocated and
//! reserved for the pod. A pod asking for an extended resource that a
//! DeviceClass backs (`DRAExtendedResource`, GA in v1.37) has one more
//! claim, made by the scheduler and named in
//! `status.extendedResourceClaimStatus`: each container gets the requests
//! mapped to it there for the extended resources it asks for. Everything is
//! read and checked before any driver is called, so that a pod that cannot
//! be prepared leaves nothing behind.
//!
//! A claim made from a template, not allocated yet, or not reserved for the
//! pod yet is a reason to wait ([`PodClaimsError::is_wait`]): the
//! controller-manager and the scheduler have not done their part.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Classify, Retry, RetryClass};
use tracing::Instrument;

use crate::common::token_bucket::TokenBucket;
use crate::dra::{ClaimPod, ClaimRef, PodClaim};
use crate::kube_api::{Connection, KUBE_API_BURST, KUBE_API_QPS};
use crate::pods::admit::spec::pod_name;
use crate::pods::pod::{PodClaims, PodRef};

mod error;
mod extended;
mod placement;

pub use error::PodClaimsError;
use extended::{extended_claim, extended_user};
pub(crate) use placement::{allocated_here, bound_here};

/// How soon a claim read refused with 403 is asked again; it doubles.
const FORBIDDEN_BACKOFF: Backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
/// How long a claim read refused with 403 is asked again before the
/// refusal counts (the Node authorizer's graph is milliseconds behind).
const FORBIDDEN_RETRY_FOR: Duration = Duration::from_secs(2);

/// Reads pods and their claims with the agent's current client, at the
/// kubelet's client-side rate.
/// Cheap to clone.
#[derive(Clone)]
pub struct PodClaimsReader {
    connection: tokio::sync::watch::Receiver<Connection>,
    /// The node whose pods may be prepared.
    node: String,
    /// Paces every read, shared by its clones.
    limiter: Arc<TokenBucket>,
}

impl PodClaimsReader {
    /// A reader for node `node`'s pods sending each request through the
    /// current client of `connection` (whose deadline bounds each).
    pub fn new(
        connection: tokio::sync::watch::Receiver<Connection>,
        node: impl Into<String>,
    ) -> Self {
        Self {
            connection,
            node: node.into(),
            limiter: Arc::new(TokenBucket::new(KUBE_API_QPS, KUBE_API_BURST)),
        }
    }

    fn client(&self) -> kube::Client {
        self.connection.borrow().client.clone()
    }

    /// The pod `namespace/name` and its claims, checked as the kubelet
    /// checks them before preparing.
    pub async fn read(&self, namespace: &str, name: &str) -> Result<PodClaims, PodClaimsError> {
        let pod = self
            .pod(namespace, name)
            .await?
            .ok_or_else(|| PodClaimsError::PodNotFound {
                pod: format!("{namespace}/{name}"),
            })?;
        self.read_for(&pod).await
    }

    /// The claims of `pod` (as the pod watch has it), checked as the
    /// kubelet checks them before preparing, and for this node: the pod is
    /// bound to it and each claim's allocation is for it. A pod without
    /// claims costs no request.
    pub async fn read_for(&self, pod: &Pod) -> Result<PodClaims, PodClaimsError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        bound_here(pod, &self.node)?;
        let names = claim_names(pod)?;
        let claims_api: Api<ResourceClaim> = Api::namespaced(self.client(), namespace);
        let mut wanted: BTreeSet<&String> = names.values().flatten().collect();
        wanted.extend(extended_claim(pod).map(|e| &e.resource_claim_name));
        // All at once: a pod's claims cost one round trip, not one each.
        let reads = wanted.into_iter().map(|claim_name| {
            let claims_api = &claims_api;
            async move {
                let what = format!("ResourceClaim {namespace}/{claim_name}");
                let claim = self
                    .get_claim(claims_api, claim_name, &what)
                    .await?
                    .ok_or_else(|| PodClaimsError::ClaimNotFound {
                        claim: format!("{namespace}/{claim_name}"),
                        pod: format!("{namespace}/{name}"),
                    })?;
                Ok::<_, PodClaimsError>((claim_name.clone(), claim))
            }
        });
        let claims: BTreeMap<String, ResourceClaim> = futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .collect();
        let planned = check(pod, &names, &claims)?;
        for claim in claims.values() {
            allocated_here(claim, &self.node, &pod_name(pod))?;
        }
        Ok(planned)
    }

    /// The UID of pod `namespace/name`, or `None` when it is gone. A node
    /// identity is refused (403) a pod no longer bound to it, as a deleted
    /// pod is: that is gone too.
    pub async fn pod_uid(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<String>, PodClaimsError> {
        match self.pod(namespace, name).await {
            Ok(pod) => Ok(pod.and_then(|p| p.metadata.uid)),
            Err(e) if e.is_forbidden() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The pace of its requests, for the pods' other requests.
    pub(crate) fn limiter(&self) -> Arc<TokenBucket> {
        self.limiter.clone()
    }

    async fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, PodClaimsError> {
        let pods: Api<Pod> = Api::namespaced(self.client(), namespace);
        self.get(&pods, name, &format!("pod {namespace}/{name}"))
            .await
    }

    /// A claim of a pod just bound: a node identity may read it once the
    /// Node authorizer's graph, which follows pods and claims a moment
    /// behind the API, has the pod on this node. Until then the answer is
    /// 403, so a 403 is asked again a few times, soon, before it counts.
    async fn get_claim(
        &self,
        api: &Api<ResourceClaim>,
        name: &str,
        what: &str,
    ) -> Result<Option<ResourceClaim>, PodClaimsError> {
        let deadline = tokio::time::Instant::now() + FORBIDDEN_RETRY_FOR;
        let mut retry = Retry::<PodClaimsError>::default();
        loop {
            match self.get(api, name, what).await {
                // Refused (403) while the graph has not caught up.
                Err(e) if e.class() == RetryClass::WhenItExists => {
                    let wait = FORBIDDEN_BACKOFF.delay(retry.count_failure());
                    if tokio::time::Instant::now() + wait >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// One GET; `None` for 404.
    async fn get<K>(
        &self,
        api: &Api<K>,
        name: &str,
        what: &str,
    ) -> Result<Option<K>, PodClaimsError>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        self.limiter.acquire().await;
        api.get_opt(name)
            .instrument(tracing::info_span!("api_request", request = %what))
            .await
            .map_err(|source| PodClaimsError::read(what, source))
    }
}

/// The names of every claim `pod` uses (its `spec.resourceClaims` that
/// resolve to one, then its extended-resource claim), without reading any.
pub(crate) fn claim_names_of(pod: &Pod) -> Result<Vec<String>, PodClaimsError> {
    let mut names: Vec<String> = Vec::new();
    for name in claim_names(pod)?.into_values().flatten() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if let Some(extended) = extended_claim(pod)
        && !names.contains(&extended.resource_claim_name)
    {
        names.push(extended.resource_claim_name.clone());
    }
    Ok(names)
}

/// `spec.resourceClaims` entry name → the claim it resolves to (`None`: the
/// entry needs no claim), as `resourceclaim.Name` resolves it.
pub(crate) fn claim_names(pod: &Pod) -> Result<BTreeMap<String, Option<String>>, PodClaimsError> {
    let pod_name = pod_name(pod);
    let spec = pod.spec.as_ref();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or_default();
    let mut names = BTreeMap::new();
    for entry in spec
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
    {
        let name = if let Some(claim) = &entry.resource_claim_name {
            Some(claim.clone())
        } else if entry.resource_claim_template_name.is_some() {
            let status = statuses
                .iter()
                .find(|s| s.name == entry.name)
                .ok_or_else(|| PodClaimsError::NotCreated {
                    pod: pod_name.clone(),
                    entry: entry.name.clone(),
                })?;
            status.resource_claim_name.clone()
        } else {
            return Err(PodClaimsError::Unsupported {
                pod: pod_name.clone(),
                entry: entry.name.clone(),
            });
        };
        names.insert(entry.name.clone(), name);
    }
    Ok(names)
}

/// Checks `claims` (by claim name) for `pod` and plans its prepare: each
/// claim allocated, reserved for the pod, and controlled by it when made
/// from a template; which containers use which claim, with which requests.
pub(crate) fn check(
    pod: &Pod,
    names: &BTreeMap<String, Option<String>>,
    claims: &BTreeMap<String, ResourceClaim>,
) -> Result<PodClaims, PodClaimsError> {
    let pod_ref = PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().ok_or(PodClaimsError::Malformed {
            what: format!("pod {}", pod_name(pod)),
            field: "metadata.uid",
        })?,
    };
    let spec = pod.spec.as_ref();
    let containers: Vec<&Container> = spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .collect();
    let from_template: BTreeSet<&str> = spec
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|e| e.resource_claim_name.is_none())
        .map(|e| e.name.as_str())
        .collect();

    let mut planned: Vec<PodClaim> = Vec::new();
    let entries = spec
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default();
    for entry in entries {
        let Some(Some(claim_name)) = names.get(&entry.name) else {
            continue;
        };
        let Some(claim) = claims.get(claim_name) else {
            continue;
        };
        let must_own = from_template.contains(entry.name.as_str());
        let checked = checked(claim, claim_name, &pod_ref, must_own)?;
        plan(
            &mut planned,
            checked,
            user(&pod_ref, &containers, &entry.name),
        );
    }
    if let Some(extended) = extended_claim(pod) {
        let claim_name = &extended.resource_claim_name;
        if let Some(claim) = claims.get(claim_name) {
            let checked = checked(claim, claim_name, &pod_ref, false)?;
            plan(
                &mut planned,
                checked,
                extended_user(&pod_ref, &containers, extended),
            );
        }
    }
    Ok(PodClaims {
        containers: containers.iter().map(|c| c.name.clone()).collect(),
        pod: pod_ref,
        claims: planned,
    })
}

/// A claim that passed the kubelet's checks: its reference and the drivers
/// of its allocation results, sorted, each once.
struct Checked {
    claim: ClaimRef,
    drivers: BTreeSet<String>,
}

/// Checks `claim` (`claim_name` in the pod's namespace) as the kubelet does
/// before preparing it for `pod`: controlled by the pod if `must_own` (made
/// from a template), allocated, and reserved for the pod.
fn checked(
    claim: &ResourceClaim,
    claim_name: &str,
    pod: &PodRef,
    must_own: bool,
) -> Result<Checked, PodClaimsError> {
    let qualified = format!("{}/{claim_name}", pod.namespace);
    let uid = claim
        .metadata
        .uid
        .clone()
        .ok_or(PodClaimsError::Malformed {
            what: format!("ResourceClaim {qualified}"),
            field: "metadata.uid",
        })?;
    if must_own && !controlled_by(claim, &pod.uid) {
        return Err(PodClaimsError::NotForPod {
            claim: qualified,
            pod: pod.to_string(),
        });
    }
    let status = claim.status.as_ref();
    let Some(allocation) = status.and_then(|s| s.allocation.as_ref()) else {
        return Err(PodClaimsError::NotAllocated {
            claim: qualified,
            uid,
        });
    };
    let reserved = status
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|r| r.uid == pod.uid);
    if !reserved {
        return Err(PodClaimsError::NotReserved {
            claim: qualified,
            uid,
            pod: pod.to_string(),
            pod_uid: pod.uid.clone(),
        });
    }
    let drivers = allocation
        .devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| r.driver.clone())
        .collect();
    Ok(Checked {
        claim: ClaimRef {
            namespace: pod.namespace.clone(),
            name: claim_name.to_string(),
            uid,
        },
        drivers,
    })
}

/// Adds `checked`, used as `user` says, to `planned`: the same claim named
/// twice (by two entries) is one record of it.
fn plan(planned: &mut Vec<PodClaim>, checked: Checked, user: ClaimPod) {
    if let Some(known) = planned
        .iter_mut()
        .find(|p| p.claim.uid == checked.claim.uid)
    {
        known.user.merge(&user);
        return;
    }
    planned.push(PodClaim {
        claim: checked.claim,
        drivers: checked.drivers.into_iter().collect(),
        user,
    });
}

/// How the pod's `containers` use its `spec.resourceClaims` entry `entry`:
/// which name it, and which of those ask only for some requests.
fn user(pod: &PodRef, containers: &[&Container], entry: &str) -> ClaimPod {
    let mut user = ClaimPod::new(pod.uid.clone(), pod.name.clone(), Vec::new());
    for container in containers {
        let uses = container
            .resources
            .as_ref()
            .and_then(|r| r.claims.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|c| c.name == entry);
        let mut named = false;
        let mut whole = false;
        let mut requests = Vec::new();
        for claim in uses {
            named = true;
            match claim.request.as_deref() {
                Some(request) if !request.is_empty() => {
                    if !requests.iter().any(|r| r == request) {
                        requests.push(request.to_string());
                    }
                }
                _ => whole = true,
            }
        }
        if !named {
            continue;
        }
        user.containers.push(container.name.clone());
        if !whole {
            user.requests.insert(container.name.clone(), requests);
        }
    }
    user
}

/// Whether `claim`'s controller is the pod with UID `pod_uid`.
fn controlled_by(claim: &ResourceClaim, pod_uid: &str) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == pod_uid)
}

#[cfg(test)]
mod tests;

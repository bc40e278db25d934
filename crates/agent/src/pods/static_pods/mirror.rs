//! Mirror pods: the API's copies of the node's static pods, through which
//! the cluster sees them (the kubelet's `pod/mirror_client.go` and the
//! mirror handling of its pod sync and housekeeping).
//!
//! Once the node's Node exists, each static pod gets a mirror pod: the
//! static pod as read (its spec, labels and annotations), with
//! `kubernetes.io/config.mirror` set to its hash and the Node as its one
//! controller owner (what NodeRestriction requires of a node making a
//! pod); the API gives it a UID of its own, and its status is the static
//! pod's (written by the pod's worker, [`Mirrors::mirror_of`]). A mirror
//! pod deleted is made again; one being deleted, or of another version of
//! the manifest, is deleted at once (UID precondition) and made again; one
//! whose static pod is gone is deleted. The sync runs when the static pods
//! change, when a mirror pod changes in the API (the pods owner says so),
//! after a failure on backoff, and every resync period.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use nodeplugins_api::backoff::Backoff;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::source::StaticPods;
use crate::kube_api::{Connection, KubeApiError, request};
use crate::pods::admit::spec::{CONFIG_HASH_ANNOTATION, MIRROR_ANNOTATION, is_mirror};
use crate::pods::informers::Informers;
use crate::pods::pod::PodRef;

/// How often the mirror pods are looked over when nothing says they
/// changed.
const RESYNC: Duration = Duration::from_secs(60);
/// A failed sync is tried again on this backoff.
const RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// The node's mirror pods, as the watch of its pods keeps them. Cheap to
/// clone.
#[derive(Clone)]
pub(crate) struct Mirrors {
    pods: Store<Pod>,
}

impl Mirrors {
    /// Looks mirror pods up in `pods`, the pods bound to the node.
    pub(crate) fn new(pods: Store<Pod>) -> Self {
        Self { pods }
    }

    /// The mirror pod of static pod `pod`, when the API has one that is
    /// its mirror and is not being deleted.
    pub(crate) fn mirror_of(&self, pod: &Pod) -> Option<PodRef> {
        let name = pod.metadata.name.as_deref()?;
        let namespace = pod.metadata.namespace.as_deref()?;
        let found = self
            .pods
            .get(&ObjectRef::<Pod>::new(name).within(namespace))?;
        if !mirrors(&found, pod) || found.metadata.deletion_timestamp.is_some() {
            return None;
        }
        Some(PodRef {
            namespace: namespace.into(),
            name: name.into(),
            uid: found.metadata.uid.clone()?,
        })
    }
}

/// Whether `mirror` is the mirror pod of static pod `pod`: its mirror
/// annotation is the static pod's hash (`IsMirrorPodOf`).
fn mirrors(mirror: &Pod, pod: &Pod) -> bool {
    let annotation = |p: &Pod, key: &str| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key).cloned())
    };
    let hash = annotation(pod, CONFIG_HASH_ANNOTATION);
    hash.is_some() && annotation(mirror, MIRROR_ANNOTATION) == hash
}

/// How a look at the mirror pods ended.
enum Sync {
    /// Every mirror pod is as the static pods say.
    Done,
    /// They cannot be made yet: the pods or the Node are not listed, or
    /// the Node does not exist (yet, or any more).
    NoNode,
}

/// Whether the reflector behind `pods` listed them once.
fn listed(pods: &Store<Pod>) -> bool {
    use futures::FutureExt;
    pods.wait_until_ready()
        .now_or_never()
        .is_some_and(|ready| ready.is_ok())
}

/// What the mirror pods' sync needs.
pub(crate) struct MirrorSync {
    pub(crate) connection: watch::Receiver<Connection>,
    pub(crate) node_name: String,
    /// The pods bound to the node, mirror pods among them.
    pub(crate) pods: Store<Pod>,
    /// The node's Node, for its UID.
    pub(crate) informers: Informers,
    pub(crate) static_pods: watch::Receiver<StaticPods>,
    /// Rung when a mirror pod changed in the API.
    pub(crate) changed: Arc<Notify>,
}

impl MirrorSync {
    /// Keeps the mirror pods in step with the static pods until
    /// `shutdown`.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut failures = 0u32;
        let mut waits = 0u32;
        loop {
            let outcome = tokio::select! {
                () = shutdown.cancelled() => return,
                outcome = self.sync() => outcome,
            };
            let wait = match outcome {
                Ok(Sync::Done) => {
                    failures = 0;
                    waits = 0;
                    RESYNC
                }
                // The pods or the Node not listed yet, or no Node yet:
                // looked at again soon.
                Ok(Sync::NoNode) => {
                    waits += 1;
                    RETRY.delay(waits)
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %e, "cannot make the mirror pods; trying again with backoff");
                    } else {
                        tracing::debug!(error = %e, "cannot make the mirror pods");
                    }
                    RETRY.delay(failures)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                Ok(()) = self.static_pods.changed() => {}
                () = self.changed.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One look: mirror pods made, replaced or deleted as the static pods
    /// say.
    async fn sync(&self) -> Result<Sync, KubeApiError> {
        let Some(statics) = self.static_pods.borrow().clone() else {
            return Ok(Sync::Done);
        };
        // Until the pods were listed the store cannot tell a mirror pod
        // missing from one not listed yet.
        if !listed(&self.pods) {
            return Ok(Sync::NoNode);
        }
        let Ok(node) = self.informers.node().await else {
            return Ok(Sync::NoNode);
        };
        let mut wanted: BTreeMap<(String, String), &Arc<Pod>> = BTreeMap::new();
        for pod in statics.values() {
            if let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
                wanted.insert((namespace.clone(), name.clone()), pod);
            }
        }
        let mut result = Ok(());
        // Mirror pods whose static pod is gone.
        for found in self.pods.state() {
            if !is_mirror(&found) {
                continue;
            }
            let (Some(namespace), Some(name)) = (&found.metadata.namespace, &found.metadata.name)
            else {
                continue;
            };
            if wanted.contains_key(&(namespace.clone(), name.clone())) {
                continue;
            }
            tracing::info!(pod = %format!("{namespace}/{name}"), "deleting the mirror pod of a static pod gone");
            if let Err(e) = self.delete(namespace, name, None).await {
                result = Err(e);
            }
        }
        let Some(node) = node.filter(|n| n.metadata.deletion_timestamp.is_none()) else {
            return result.map(|()| {
                if wanted.is_empty() {
                    Sync::Done
                } else {
                    Sync::NoNode
                }
            });
        };
        let Some(node_uid) = node.metadata.uid.clone() else {
            return result.map(|()| Sync::NoNode);
        };
        for ((namespace, name), pod) in wanted {
            let key = ObjectRef::<Pod>::new(&name).within(&namespace);
            if let Some(found) = self.pods.get(&key) {
                if !is_mirror(&found) {
                    // A pod of the API's has the name: nothing to do
                    // until it goes (creating would fail).
                    continue;
                }
                if found.metadata.deletion_timestamp.is_none() && mirrors(&found, pod) {
                    continue;
                }
                tracing::info!(pod = %format!("{namespace}/{name}"), "deleting an outdated mirror pod, to make it again");
                if let Err(e) = self
                    .delete(&namespace, &name, found.metadata.uid.clone())
                    .await
                {
                    result = Err(e);
                    continue;
                }
            }
            if let Err(e) = self.create(pod, &node_uid).await {
                result = Err(e);
            }
        }
        result.map(|()| Sync::Done)
    }

    fn api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.connection.borrow().client.clone(), namespace)
    }

    /// Makes the mirror pod of `pod`, owned by the Node of UID `node_uid`.
    async fn create(&self, pod: &Pod, node_uid: &str) -> Result<(), KubeApiError> {
        let mut mirror = pod.clone();
        let hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION).cloned())
            .unwrap_or_default();
        mirror
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(MIRROR_ANNOTATION.into(), hash.clone());
        mirror.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node_name.clone(),
            uid: node_uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let namespace = mirror.metadata.namespace.clone().unwrap_or_default();
        let name = mirror.metadata.name.clone().unwrap_or_default();
        let api = self.api(&namespace);
        let params = PostParams::default();
        let call = api.create(&params, &mirror);
        match request(|| format!("create mirror pod {namespace}/{name}"), call).await {
            Ok(made) => {
                tracing::info!(pod = %format!("{namespace}/{name}"), uid = made.metadata.uid.as_deref().unwrap_or(""), "mirror pod made");
                Ok(())
            }
            // Made meanwhile (the watch had not shown it yet).
            Err(e) if e.status() == Some(409) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes mirror pod `namespace/name` at once (if it is still `uid`).
    async fn delete(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<String>,
    ) -> Result<(), KubeApiError> {
        let api = self.api(namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let call = api.delete(name, &params);
        match request(|| format!("delete mirror pod {namespace}/{name}"), call).await {
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

//! What callers hold: the pods owner's published pods, its events, and,
//! when pods are not served from the API, pod-level DRA by hand (`dra
//! prepare --pod`, `dra unprepare --pod`), which reads the pod and its
//! claims and asks the DRA manager, in the caller's task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::pod::{PreparedPod, UnpreparedPod};
use crate::dra::{DraError, DraHandle};
use crate::event::AgentEvent;
use crate::pods::admit::claims::{PodClaimsError, PodClaimsReader};
use crate::pods::admit::container::container_devices;
use crate::pods::admit::spec::is_mirror;
use crate::pods::lifecycle::shutdown_requests::{ActivePod, ShutdownRequest};
use crate::pods::snapshot::{PodStatus, PodsSnapshot};
use crate::pods::static_pods::source::StaticPods;
use crate::published::Store;

/// The pods owner has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the pods owner is not running")]
pub struct PodsStopped;

/// Why a pod could not be prepared or unprepared by hand.
#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    /// Pods are served from the API: their claims follow them, and a
    /// prepare by hand would be given back by the next reconcile.
    #[error(
        "the agent serves the node's pods from the API: their devices and claims follow the pods; run it with --pods off to prepare pods by hand"
    )]
    Served,
    /// The pod or its claims could not be read, or may not be prepared.
    #[error(transparent)]
    Read(#[from] PodClaimsError),
    /// The DRA manager refused.
    #[error(transparent)]
    Dra(#[from] DraError),
}

/// Reads the pods owner's state. Cheap to clone.
#[derive(Clone)]
pub struct PodsHandle {
    pub(crate) serving: bool,
    /// The pods bound to the node, as the API shows them.
    pub(crate) bound: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Pod>,
    pub(crate) store: Store<PodsSnapshot>,
    pub(crate) events: broadcast::Sender<AgentEvent>,
    pub(crate) claims: PodClaimsReader,
    pub(crate) dra: DraHandle,
    /// The claimed volumes' usage, when pods get volumes.
    pub(crate) volume_stats: Option<crate::volumes::VolumeStats>,
    /// The CSI node calls' durations, when pods get volumes.
    pub(crate) csi_operations: Option<crate::volumes::CsiOperations>,
    /// The pods' certificates by signer and state, when pods get volumes.
    pub(crate) pod_certificate_states: Option<crate::volumes::PodCertificateStates>,
    /// The node's static pods, when it has a static pod path.
    pub(crate) static_pods: Option<watch::Receiver<StaticPods>>,
    /// To the pods owner, for the node shutdown manager.
    pub(crate) shutdown_requests: tokio::sync::mpsc::UnboundedSender<ShutdownRequest>,
    /// The pods' probes' metrics (`/metrics/probes`).
    #[cfg_attr(not(feature = "kubelet-server"), allow(dead_code))]
    pub(crate) prober_metrics: crate::pods::run::probes::ProberMetrics,
    /// The hooks' metrics, served on `/metrics`.
    pub(crate) lifecycle_metrics: crate::pods::run::lifecycle_metrics::LifecycleMetrics,
}

impl PodsHandle {
    /// Every pod the node runs, as the kubelet lists them: those bound to
    /// it in the API as the API last showed them (none before the first
    /// listing, or when pods are not served), mirror pods aside, and its
    /// static pods as read from their files.
    pub fn bound_pods(&self) -> Vec<Arc<k8s_openapi::api::core::v1::Pod>> {
        let mut pods: Vec<_> = self
            .bound
            .state()
            .into_iter()
            .filter(|p| !is_mirror(p))
            .collect();
        if let Some(statics) = self.static_pods.as_ref().and_then(|s| s.borrow().clone()) {
            pods.extend(statics.values().cloned());
        }
        pods
    }

    /// The pod `namespace`/`name` bound to the node, as the API last
    /// showed it.
    pub fn bound_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<k8s_openapi::api::core::v1::Pod>> {
        // A static pod before its mirror pod, which has its name.
        let statics = self.static_pods.as_ref().and_then(|s| s.borrow().clone());
        let found = statics.and_then(|statics| {
            statics
                .values()
                .find(|p| {
                    p.metadata.namespace.as_deref() == Some(namespace)
                        && p.metadata.name.as_deref() == Some(name)
                })
                .cloned()
        });
        found.or_else(|| {
            self.bound
                .get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace))
        })
    }

    /// The pods' probes' metrics, as the kubelet serves them on
    /// `/metrics/probes`.
    #[cfg(feature = "kubelet-server")]
    pub(crate) fn prober_metrics(&self) -> &crate::pods::run::probes::ProberMetrics {
        &self.prober_metrics
    }

    /// The hooks' metrics (`kubelet_lifecycle_handler_http_fallbacks_total`,
    /// `kubelet_sleep_action_terminated_early_total`).
    pub(crate) fn lifecycle_metrics(
        &self,
    ) -> &crate::pods::run::lifecycle_metrics::LifecycleMetrics {
        &self.lifecycle_metrics
    }

    /// The usage of the pods' claimed volumes (the kubelet's
    /// `kubelet_volume_stats_*`), when pods get volumes (a real runtime).
    pub fn volume_stats(&self) -> Option<crate::volumes::VolumeStats> {
        self.volume_stats.clone()
    }

    /// The durations of the CSI node calls made for the pods' volumes
    /// (the kubelet's `csi_operations_seconds`), when pods get volumes.
    pub fn csi_operations(&self) -> Option<crate::volumes::CsiOperations> {
        self.csi_operations.clone()
    }

    /// How many of the pods' podCertificate projections are in each state,
    /// by signer (the kubelet's `kubelet_podcertificate_states`), when pods
    /// get volumes.
    pub fn pod_certificate_states(&self) -> Option<crate::volumes::PodCertificateStates> {
        self.pod_certificate_states.clone()
    }

    /// Whether the node's pods are served from the API.
    pub fn serving(&self) -> bool {
        self.serving
    }

    /// The pods after the latest change (empty, and not
    /// [`running`](PodsSnapshot::running), before the owner runs).
    pub fn snapshot(&self) -> Arc<PodsSnapshot> {
        self.store.get()
    }

    /// The pods after the latest change, once the owner runs.
    pub async fn running_snapshot(&self) -> Result<Arc<PodsSnapshot>, PodsStopped> {
        self.store.wait_until_ready().await.map_err(|_| PodsStopped)
    }

    /// The pods after every change, for a reader that follows them (the
    /// pod-resources API lists exactly the admitted pods).
    pub fn subscribe(&self) -> watch::Receiver<Arc<PodsSnapshot>> {
        self.store.subscribe()
    }

    /// A counter that increases on every change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.store.changes()
    }

    /// Events from now on: pods admitted, waiting, failed, given back.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.events.subscribe()
    }

    /// Waits until the pods satisfy `pred`, re-checking after every change,
    /// and returns them; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[Arc<PodStatus>]) -> bool,
    ) -> Result<Option<Vec<Arc<PodStatus>>>, PodsStopped> {
        self.store
            .wait_for(timeout, PodsSnapshot::pods, |p| pred(p))
            .await
            .map_err(|_| PodsStopped)
    }

    /// Prepares pod `namespace/name`'s claims by hand, as the kubelet's DRA
    /// manager would: the pod and its claims are read and checked before
    /// any driver is called. Refused while pods are served from the API.
    pub async fn prepare_pod(&self, namespace: &str, name: &str) -> Result<PreparedPod, PodsError> {
        if self.serving {
            return Err(PodsError::Served);
        }
        let pod = self.claims.read(namespace, name).await?;
        let claims = self.dra.prepare_pod(&pod.claims).await?;
        let containers = if claims.iter().any(|c| c.result.error.is_some()) {
            Vec::new()
        } else {
            container_devices(&pod, &claims)
        };
        Ok(PreparedPod {
            pod: pod.pod,
            claims,
            containers,
        })
    }

    /// Unprepares by hand what pod `namespace/name` uses, as recorded: the
    /// pod of that name in the API, and every earlier pod of that name the
    /// records still name (a pod made again under the same name has a new
    /// UID; the old one's claims are given back too). Works after the pod
    /// is gone from the API, and with the API away. Refused while pods are
    /// served from the API.
    pub async fn unprepare_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<UnpreparedPod, PodsError> {
        if self.serving {
            return Err(PodsError::Served);
        }
        let live = match self.claims.pod_uid(namespace, name).await {
            Ok(found) => found,
            // The records are enough to unprepare: the API being away must
            // not keep a pod's devices.
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e,
                    "pod not read from the API; unpreparing what the records name");
                None
            }
        };
        Ok(super::manual::unprepare_by_name(&self.dra, namespace, name, live).await?)
    }

    /// Tells the pods owner the node is shutting down (`true`) or no
    /// longer (`false`).
    pub(crate) fn node_shutting_down(&self, now: bool) {
        let _ = self
            .shutdown_requests
            .send(ShutdownRequest::ShuttingDown(now));
    }

    /// The pods the node runs now (none when the owner is gone).
    pub(crate) async fn active_pods(&self) -> Vec<ActivePod> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        if self
            .shutdown_requests
            .send(ShutdownRequest::ActivePods(answer))
            .is_err()
        {
            return Vec::new();
        }
        answered.await.unwrap_or_default()
    }

    /// Stops `pods` (UID, grace period) for good, as the node's shutdown
    /// does; returns once all gave back what they held (at once when the
    /// owner is gone).
    pub(crate) async fn kill_for_shutdown(&self, pods: Vec<(String, Duration)>) {
        let (done, finished) = tokio::sync::oneshot::channel();
        if self
            .shutdown_requests
            .send(ShutdownRequest::Kill { pods, done })
            .is_err()
        {
            return;
        }
        let _ = finished.await;
    }
}

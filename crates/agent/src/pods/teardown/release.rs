//! Giving back what a pod held, once it ended or went, in the kubelet's
//! order: first everything it runs stopped (its containers within the
//! grace period, then its sandbox stopped and removed), then its volumes
//! torn down (a volume that cannot be keeps the pod, as the kubelet keeps
//! a pod whose volumes may be mounted), then its claims
//! unprepared (a claim with its last pod; the others only forget it), then
//! its devices released; last, for a pod being deleted, the pod deleted
//! with no grace period, which ends its graceful deletion. While a driver
//! fails to unprepare a claim the pod keeps its devices too: the kubelet
//! keeps a pod whose claims are not unprepared among its active pods,
//! whose devices stay allocated. Each step is asked of its owner, which
//! decides; a failure is tried again from the start (each step is
//! idempotent).

use std::sync::Arc;
use std::time::Duration;

use crate::device::DeviceHandle;
use crate::dra::{DraError, DraHandle};
use crate::pods::pod::PodRef;
use crate::pods::status::status_writer::StatusWriter;
use k8s_openapi::api::core::v1::Pod;

use crate::pods::kube_events::PodEvents;
use crate::pods::run::worker::NodeFacts;
use crate::pods::teardown::kill_container::PodKiller;
use crate::pods::teardown::terminate::terminate;
use crate::runtime::{ContainerRuntime, RuntimeError};

/// Why what a pod held was not all given back.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReleaseError {
    /// Its containers could not be stopped: nothing is given back while
    /// they may run.
    #[error("cannot stop the pod's containers: {0}")]
    Runtime(Arc<RuntimeError>),
    /// The DRA manager refused.
    #[error(transparent)]
    Dra(#[from] DraError),
    /// Its volumes could not all be torn down.
    #[error(transparent)]
    Volumes(#[from] crate::volumes::VolumeError),
    /// Drivers failed to unprepare claims; they stay recorded for the pod.
    #[error("{}", .0.join("; "))]
    Unprepare(Vec<String>),
    /// The deleted pod could not be deleted for good.
    #[error("cannot delete the pod: {0}")]
    Delete(String),
    /// Giving back failed unexpectedly (a bug); tried again.
    #[error("giving back failed unexpectedly")]
    Panicked,
    /// A manager stopped: the agent is shutting down.
    #[error("the agent is stopping")]
    Stopping,
}

/// How a pod ends here.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ending {
    /// The grace period of its containers.
    pub(crate) grace: Duration,
    /// The pod, when known: its containers' hooks, its sidecars stopped
    /// after the others, the Events of its containers' stop.
    pub(crate) pod: Option<Arc<Pod>>,
    /// Delete it from the API once everything is given back (its deletion
    /// was asked for).
    pub(crate) delete: bool,
}

/// Who is asked.
#[derive(Clone)]
pub(crate) struct Releaser {
    /// Where the pods' files are, with a real runtime.
    pub(crate) pods_dir: Option<std::path::PathBuf>,
    pub(crate) runtime: Arc<dyn ContainerRuntime>,
    pub(crate) devices: DeviceHandle,
    pub(crate) dra: DraHandle,
    pub(crate) writer: StatusWriter,
    /// The volume manager, with a real runtime.
    pub(crate) volumes: Option<crate::volumes::VolumeHandle>,
    /// Events on the pods' containers being stopped.
    pub(crate) pod_events: PodEvents,
    /// The node's address: pods' `httpGet` hooks go there.
    pub(crate) node: Arc<NodeFacts>,
    /// The hooks' metrics.
    pub(crate) lifecycle_metrics: crate::pods::run::lifecycle_metrics::LifecycleMetrics,
}

impl Releaser {
    /// Stops what pod `pod` runs and gives back what it holds, as `ending`
    /// says.
    pub(crate) async fn release(&self, pod: &PodRef, ending: &Ending) -> Result<(), ReleaseError> {
        let killer = PodKiller {
            runtime: self.runtime.clone(),
            events: self.pod_events.clone(),
            pod_ref: pod.clone(),
            pod: ending.pod.clone(),
            pod_ip: self.node.node_ip().await,
            lifecycle_metrics: self.lifecycle_metrics.clone(),
        };
        let stopped = terminate(&killer, ending.grace)
            .await
            .map_err(|e| ReleaseError::Runtime(Arc::new(e)))?;
        if stopped > 0 {
            tracing::info!(containers = stopped, grace = ?ending.grace, "the pod's containers stopped");
        }
        if let Some(volumes) = &self.volumes {
            volumes.tear_down(&pod.uid).await?;
        }
        if let Some(dir) = &self.pods_dir
            && let Err(e) =
                crate::pods::run_options::pod_files::PodFiles::new(dir, &pod.uid).remove()
        {
            tracing::warn!(error = %e, "cannot remove the pod's files");
        }
        let failures: Vec<String> = self
            .dra
            .unprepare_pod(&pod.uid)
            .await?
            .into_iter()
            .filter_map(|c| {
                let error = c.error?;
                Some(format!(
                    "ResourceClaim {}/{}: {error}",
                    c.claim.namespace, c.claim.name
                ))
            })
            .collect();
        if !failures.is_empty() {
            return Err(ReleaseError::Unprepare(failures));
        }
        self.devices
            .release(&pod.uid)
            .await
            .map_err(|_| ReleaseError::Stopping)?;
        if ending.delete {
            self.writer
                .delete(pod)
                .await
                .map_err(|e| ReleaseError::Delete(e.to_string()))?;
            tracing::info!(
                "the deleted pod's containers stopped and what it held was given back: deleted"
            );
        }
        Ok(())
    }
}

/// How pod `pod` ends here: its containers' grace period (a deletion's,
/// else the pod's `terminationGracePeriodSeconds`, 30 s by default; never
/// under the kubelet's 2 s; 2 s for a pod gone from the API, the pod's own
/// for a static pod gone from its file), the pod, and whether it is
/// deleted once everything is given back.
pub(crate) fn ending_of(pod: Option<&Pod>, in_api: bool) -> Ending {
    let Some(pod) = pod else {
        return Ending {
            grace: crate::pods::teardown::terminate::MINIMUM_GRACE,
            ..Ending::default()
        };
    };
    let seconds = if in_api || crate::pods::admit::spec::is_static(pod) {
        pod.metadata
            .deletion_grace_period_seconds
            .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
            .unwrap_or(30)
    } else {
        0
    };
    let grace = Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
        .max(crate::pods::teardown::terminate::MINIMUM_GRACE);
    Ending {
        grace,
        pod: Some(Arc::new(pod.clone())),
        delete: in_api && pod.metadata.deletion_timestamp.is_some(),
    }
}

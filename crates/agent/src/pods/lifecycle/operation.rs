//! One pod's operation on the pods owner's `JoinSet`, from where the owner
//! starts it to where the owner is needed again, as the kubelet's pod
//! worker goes from syncing a pod to terminating it to cleaning up after
//! it in one goroutine:
//!
//! - an admission that succeeds goes on into the pod's worker, which runs
//!   its containers;
//! - a worker whose pod ended, or that was told to stop, goes on into the
//!   release, which stops what the pod runs and gives back what it holds.
//!
//! On the way the operation tells the owner where it is
//! ([`Report::Admitted`], [`Report::Releasing`]), so the owner's rows, its
//! "a release frees devices" wait for admissions and what it cuts short
//! follow it; the owner hears one end per operation ([`Outcome`]). A
//! failed step ends the operation and the owner starts the next one
//! (after its backoff) where it stopped.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::pods::admit::admission::{AdmissionError, Admitted, Admitter};
use crate::pods::admit::sysctls::{SYSCTL_FORBIDDEN, forbidden_sysctl, running_kernel};
use crate::pods::lifecycle::admission_gate::GatePass;
use crate::pods::lifecycle::report::Report;
use crate::pods::lifecycle::shutdown_requests::{
    Kills, NODE_SHUTDOWN_MESSAGE, NODE_SHUTDOWN_REASON,
};
use crate::pods::pod::PodRef;
use crate::pods::run::worker::{Worker, WorkerContext, WorkerEnd};
use crate::pods::teardown::release::{Ending, ReleaseError, Releaser, ending_of};

/// The running kernel's version, read once.
static RUNNING_KERNEL: std::sync::LazyLock<Option<(u32, u32)>> =
    std::sync::LazyLock::new(running_kernel);

/// What operations use, shared by all of them.
pub(in crate::pods) struct Operations {
    pub(in crate::pods) admitter: Admitter,
    pub(in crate::pods) worker_context: WorkerContext,
    pub(in crate::pods) releaser: Releaser,
    /// Every pod bound to the node, as the watch keeps it: whether the API
    /// still has a pod decides how it ends.
    pub(in crate::pods) pods: Store<Pod>,
    /// Pods the node stops for good (its shutdown): UID → the grace
    /// period each gets.
    pub(in crate::pods) kills: Kills,
}

/// A running pod's lane to its operation: the pod's changes, and the stop
/// that cuts an admission short or tells a worker to stop.
pub(in crate::pods) struct Lane {
    pub(in crate::pods) pod: watch::Receiver<Arc<Pod>>,
    pub(in crate::pods) stop: CancellationToken,
}

/// Where an operation starts.
pub(in crate::pods) enum Start {
    /// Admit the pod (its devices allocated with `pass` held), then run it.
    Admit {
        pass: GatePass,
        fresh: bool,
        lane: Lane,
    },
    /// Run the admitted pod (again, after its worker failed).
    Run { admitted: Admitted, lane: Lane },
    /// Give back what the pod holds, as `Ending` says (again after a
    /// failed release; a pod the API no longer has; an admission cut
    /// short).
    Release(Ending),
    /// Refuse the pod for good: its status `Failed` with the reason and
    /// message, and a Warning saying so (the kubelet's `rejectPod`).
    Reject {
        reason: &'static str,
        message: &'static str,
    },
}

/// How an operation ended: where the owner takes over.
#[derive(Debug)]
pub(in crate::pods) enum Outcome {
    /// The pod was not admitted: it waits, or failed.
    NotAdmitted(AdmissionError),
    /// Its admission was cut short (the pod is no longer to be admitted):
    /// what it got so far is to be given back.
    AdmissionCut,
    /// Its worker found the runtime lost the pod's sandbox: it is to be
    /// admitted again, setting up again what it holds.
    RuntimeLost,
    /// Its worker stopped with nobody left to tell it what is next (the
    /// owner is going away): nothing was given back.
    Abandoned,
    /// The release ended.
    Released(Result<(), ReleaseError>),
    /// The pod was refused: whether its status says so.
    Rejected(bool),
}

impl Operations {
    /// Runs pod `pod_ref`'s operation from `start`.
    pub(in crate::pods) async fn run(self: Arc<Self>, pod_ref: PodRef, start: Start) -> Outcome {
        match start {
            Start::Release(ending) => self.release(&pod_ref, &ending).await,
            Start::Reject { reason, message } => self.reject(&pod_ref, reason, message).await,
            Start::Run { admitted, lane } => self.run_pod(&pod_ref, &admitted, lane).await,
            Start::Admit { pass, fresh, lane } => {
                let pod = lane.pod.borrow().clone();
                // The kubelet's sysctl admission comes before its
                // resource admission.
                if let Some(message) = forbidden_sysctl(&pod, *RUNNING_KERNEL) {
                    drop(pass);
                    return self.reject(&pod_ref, SYSCTL_FORBIDDEN, &message).await;
                }
                let admission = self
                    .admitter
                    .admit(&pod, &pod_ref, pass, fresh)
                    .instrument(pod_ref.span("admit"));
                let admitted = tokio::select! {
                    biased;
                    () = lane.stop.cancelled() => return Outcome::AdmissionCut,
                    admitted = admission => admitted,
                };
                match admitted {
                    Ok(admitted) => {
                        self.report(Report::Admitted {
                            uid: pod_ref.uid.clone(),
                            admitted: admitted.clone(),
                        });
                        self.run_pod(&pod_ref, &admitted, lane).await
                    }
                    Err(e) => Outcome::NotAdmitted(e),
                }
            }
        }
    }

    /// Runs the admitted pod's containers until it ends or is to stop, then
    /// gives back what it holds.
    async fn run_pod(&self, pod_ref: &PodRef, admitted: &Admitted, lane: Lane) -> Outcome {
        let mut worker = Worker::new(
            self.worker_context.clone(),
            pod_ref.clone(),
            lane.pod.clone(),
            &admitted.containers,
            lane.stop.clone(),
            admitted.restored,
        );
        let ended = match worker.run().instrument(pod_ref.span("run")).await {
            WorkerEnd::RuntimeLost => return Outcome::RuntimeLost,
            WorkerEnd::Ended(phase) => Some(phase),
            WorkerEnd::Stopped if lane.stop.is_cancelled() => {
                let pod = lane.pod.borrow().clone();
                let disruption = (NODE_SHUTDOWN_REASON, NODE_SHUTDOWN_MESSAGE);
                let kill = match self.kills.grace_of(&pod_ref.uid) {
                    Some(grace) => Some((grace, Some(disruption))),
                    // A deleted pod's terminal status is written before it
                    // is deleted for good.
                    None if pod.metadata.deletion_timestamp.is_some()
                        && self.in_api(&pod, pod_ref) =>
                    {
                        Some((ending_of(Some(&pod), true).grace, None))
                    }
                    None => None,
                };
                match kill {
                    Some((grace, disruption)) => Some(
                        worker
                            .kill(grace, disruption)
                            .instrument(pod_ref.span("kill"))
                            .await,
                    ),
                    None => None,
                }
            }
            WorkerEnd::Stopped => return Outcome::Abandoned,
        };
        self.report(Report::Releasing {
            uid: pod_ref.uid.clone(),
            ended,
        });
        let pod = lane.pod.borrow().clone();
        let ending = ending_of(Some(&pod), self.in_api(&pod, pod_ref));
        self.release(pod_ref, &ending).await
    }

    async fn release(&self, pod_ref: &PodRef, ending: &Ending) -> Outcome {
        let released = self
            .releaser
            .release(pod_ref, ending)
            .instrument(pod_ref.span("release"))
            .await;
        Outcome::Released(released)
    }

    /// Refuses pod `pod_ref` for good, as the kubelet's `rejectPod`: a
    /// Warning, and its status `Failed` with `reason` and the message.
    async fn reject(&self, pod_ref: &PodRef, reason: &str, message: &str) -> Outcome {
        let _pod = pod_ref.span("admit").entered();
        tracing::info!(%reason, %message, "the pod is refused");
        drop(_pod);
        self.worker_context
            .pod_events
            .warning(pod_ref, reason, message)
            .await;
        let status = serde_json::json!({
            "phase": "Failed",
            "reason": reason,
            "message": format!("Pod was rejected: {message}"),
        });
        match self
            .releaser
            .writer
            .patch_status(pod_ref, None, &status)
            .await
        {
            Ok(_) => Outcome::Rejected(true),
            Err(e) => {
                let _pod = pod_ref.span("admit").entered();
                tracing::warn!(error = %e, "cannot write the refused pod's status");
                Outcome::Rejected(false)
            }
        }
    }

    /// Whether the API still has pod `pod_ref` (not one made again under
    /// its name).
    fn in_api(&self, pod: &Pod, pod_ref: &PodRef) -> bool {
        let Some(name) = pod.metadata.name.as_deref() else {
            return false;
        };
        let key = ObjectRef::<Pod>::new(name).within(&pod_ref.namespace);
        self.pods
            .get(&key)
            .is_some_and(|p| p.metadata.uid.as_deref() == Some(pod_ref.uid.as_str()))
    }

    fn report(&self, report: Report) {
        let _ = self.worker_context.reports.send(report);
    }
}

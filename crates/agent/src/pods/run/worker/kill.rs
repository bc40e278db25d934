//! A pod stopped for good, as the kubelet's `SyncTerminatingPod` stops
//! it: by the node itself (its shutdown: the status first shows the
//! `DisruptionTarget` condition while the containers stop, the phase
//! staying, since they may still run), or because it is deleted. The
//! containers and sandbox are stopped within the grace period given (the
//! readiness probes going on meanwhile, their verdicts written), then
//! the status is written terminal (`Failed`, with the node's reason
//! and message if it stopped the pod, or `Succeeded` when every app
//! container exited 0) from what the runtime shows of them then, before
//! the pod is given back and a deleted pod deleted for good: a Job's
//! controller reads a deleted pod's end from it (kubernetes#116410).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use super::{TRANSIENT_BACKOFF, Worker, observe, probe_results};
use crate::pods::run::pod_sync::{ApiPhase, Observed, SyncPlan, terminal_plan};
use crate::pods::teardown::kill_container::PodKiller;
use crate::pods::teardown::release::ending_of;
use crate::pods::teardown::terminate::{MINIMUM_GRACE, stop};
use crate::runtime::RuntimeError;

/// How often the terminal status is tried before the pod is given back
/// without it.
const STATUS_TRIES: u32 = 5;

impl Worker {
    /// Stops the pod within `grace` (at least the kubelet's 2 s), its
    /// status saying `disruption` (reason, message) if the node stops it;
    /// the phase it ended in.
    pub(crate) async fn kill(
        &mut self,
        grace: Duration,
        disruption: Option<(&'static str, &'static str)>,
    ) -> ApiPhase {
        self.disruption = disruption;
        let reason = disruption.map_or("the pod is deleted", |(reason, _)| reason);
        let pod = self.pod.borrow().clone();
        let runtime = self.context.runtime.clone();
        let uid = self.pod_ref.uid.clone();
        if let Some(Some(prober)) = &self.prober {
            prober.stop_liveness_and_startup();
        }
        if let Ok(observed) = observe(runtime.as_ref(), &uid).await {
            let decided = self.while_stopping(&pod, &observed);
            self.write_status(&pod, &decided).await;
        }
        let grace = grace.max(MINIMUM_GRACE);
        let killer = self.killer(&pod).await;
        let stopping = stop(&killer, grace);
        tokio::pin!(stopping);
        let stopped = loop {
            tokio::select! {
                stopped = &mut stopping => break stopped,
                // The readiness probes go on while the containers stop, as
                // the kubelet's (it stops only liveness and startup): a
                // container that stops answering is shown not ready, and
                // the pod's endpoints stop serving before it is gone.
                () = probe_results(self.prober.as_ref()) => {
                    if let Ok(observed) = observe(runtime.as_ref(), &uid).await {
                        self.show_probes(&observed);
                        let pod = self.pod.borrow().clone();
                        let decided = self.while_stopping(&pod, &observed);
                        self.write_status(&pod, &decided).await;
                    }
                }
            }
        };
        match stopped {
            Ok((stopped, _)) => {
                tracing::info!(containers = stopped, ?grace, %reason, "the pod's containers stopped")
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot stop the pod's containers; its release stops them")
            }
        }
        let mut phase = ApiPhase::Failed;
        for attempt in 1..=STATUS_TRIES {
            // The pod as the API has it now: the first write changed it.
            let pod = self.pod.borrow().clone();
            match observe(runtime.as_ref(), &uid).await {
                Ok(observed) => {
                    let decided = terminal_plan(&pod, &observed, SystemTime::now());
                    phase = decided.phase;
                    if self.write_status(&pod, &decided).await.is_some() {
                        return phase;
                    }
                    if self.pod_gone {
                        // Deleted for good meanwhile (force-deleted, say).
                        return phase;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the stopped pod's containers"),
            }
            tokio::time::sleep(TRANSIENT_BACKOFF.delay(attempt)).await;
        }
        tracing::warn!(
            phase = phase.as_str(),
            "the stopped pod's status could not be written; it is given back without it"
        );
        phase
    }
}

impl Worker {
    /// What the status shows while the pod's containers stop: each
    /// container as the runtime has it, nothing started again, and what
    /// its probes say.
    fn while_stopping(&self, pod: &Pod, observed: &Observed) -> SyncPlan {
        let mut decided = self.plan(pod, observed, SystemTime::now());
        decided.settle();
        decided
    }

    /// A pod whose app containers all ended for good while its sidecars
    /// run: the sidecars stopped within the pod's grace period, in the
    /// kubelet's termination order, with its sandbox (the kubelet's
    /// `KillPod` once no regular container is left to keep), then the
    /// pod as the runtime shows it stopped: terminal.
    pub(super) async fn stop_sidecars(&self, pod: &Pod) -> Result<SyncPlan, RuntimeError> {
        let grace = ending_of(Some(pod), true).grace;
        let killer = self.killer(pod).await;
        let (stopped, _) = stop(&killer, grace).await?;
        tracing::info!(
            containers = stopped,
            ?grace,
            "the pod's app containers ended: its sidecars stopped"
        );
        let observed = observe(self.context.runtime.as_ref(), &self.pod_ref.uid).await?;
        Ok(terminal_plan(pod, &observed, SystemTime::now()))
    }

    /// What stops `pod`'s containers: with their hooks, the pod's
    /// address and its Events.
    pub(super) async fn killer(&self, pod: &Pod) -> PodKiller {
        PodKiller {
            runtime: self.context.runtime.clone(),
            events: self.context.pod_events.clone(),
            pod_ref: self.pod_ref.clone(),
            pod: Some(Arc::new(pod.clone())),
            pod_ip: self.context.node.node_ip().await,
            lifecycle_metrics: self.context.lifecycle_metrics.clone(),
        }
    }
}

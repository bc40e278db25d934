//! A pod stopped for good by the node itself (its shutdown), as the
//! kubelet's `SyncTerminatingPod` stops a pod killed with a status: the
//! status first shows the `DisruptionTarget` condition while the
//! containers stop (the phase stays, since they may still run), then the
//! containers and sandbox are stopped within the grace period given, and
//! the status is written terminal (`Failed` with the reason and message,
//! or `Succeeded` when every app container exited 0) from what the
//! runtime shows of them then.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use super::{TRANSIENT_BACKOFF, Worker, observe};
use crate::pods::run::pod_sync::{ApiPhase, terminal_plan};
use crate::pods::teardown::kill_container::PodKiller;
use crate::pods::teardown::terminate::{MINIMUM_GRACE, stop};

/// How often the terminal status is tried before the pod is given back
/// without it.
const STATUS_TRIES: u32 = 5;

impl Worker {
    /// Stops the pod within `grace` (at least the kubelet's 2 s), its
    /// status saying (`reason`, `message`); the phase it ended in.
    pub(crate) async fn kill(
        &mut self,
        grace: Duration,
        reason: &'static str,
        message: &'static str,
    ) -> ApiPhase {
        self.disruption = Some((reason, message));
        let pod = self.pod.borrow().clone();
        let runtime = self.context.runtime.clone();
        let uid = self.pod_ref.uid.clone();
        if let Ok(observed) = observe(runtime.as_ref(), &uid).await {
            let mut decided = self.plan(&pod, &observed, SystemTime::now());
            decided.start.clear();
            decided.kill.clear();
            self.write_status(&pod, &decided).await;
        }
        let grace = grace.max(MINIMUM_GRACE);
        let killer = self.killer(&pod).await;
        match stop(&killer, grace).await {
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
    /// What stops `pod`'s containers: with their hooks, the pod's
    /// address and its Events.
    pub(super) async fn killer(&self, pod: &Pod) -> PodKiller {
        PodKiller {
            runtime: self.context.runtime.clone(),
            events: self.context.pod_events.clone(),
            pod_ref: self.pod_ref.clone(),
            pod: Some(Arc::new(pod.clone())),
            pod_ip: self.context.node.node_ip().await,
        }
    }
}

//! A worker's side of its pod's probes: they are started at its first
//! look (the kubelet makes them when it first syncs the pod), told what
//! the worker sees of each container, read for each round's plan, and a
//! container whose liveness or startup probe failed is killed as the
//! kubelet kills it: a `Killing` Event ("Container app failed liveness
//! probe, will be restarted"), then a stop with the probe's own grace
//! period when it has one, else the pod's (at least 2 s).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::Worker;
use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;
use crate::pods::run::pod_sync::{Observed, ProbeKill, ProbeVerdicts};
use crate::pods::run::probes::{
    ContainerTarget, PodProber, ProbeContext, ProbeKind, Targets, field_path,
};
use crate::runtime::ContainerState;

/// The shortest grace a kill gets (the kubelet's
/// `minimumGracePeriodInSeconds`).
const MINIMUM_GRACE: Duration = Duration::from_secs(2);
/// The kubelet's reason of a container's kill Event.
const KILLING: &str = "Killing";

impl Worker {
    /// Starts the pod's probes, once.
    pub(super) async fn start_probes(&mut self, pod: &Pod) {
        if self.prober.is_some() {
            return;
        }
        let pod_ip = self
            .context
            .node
            .node_ip()
            .await
            .unwrap_or_else(|| "127.0.0.1".into());
        let (agent_started, agent_start) = self.context.started;
        let context = |results| ProbeContext {
            runtime: self.context.runtime.clone(),
            pod: self.pod_ref.clone(),
            pod_ip,
            events: self.context.pod_events.clone(),
            results,
            agent_start,
        };
        self.prober = Some(PodProber::start(pod, context, agent_started));
    }

    /// What the probes say of each of `observed`'s running containers.
    pub(super) fn verdicts(&self, observed: &Observed) -> ProbeVerdicts {
        let Some(Some(prober)) = &self.prober else {
            return ProbeVerdicts::new();
        };
        observed
            .containers
            .iter()
            .filter(|(_, (c, _))| c.state == ContainerState::Running)
            .map(|(name, (c, _))| (name.clone(), prober.results().probed(name, &c.id)))
            .collect()
    }

    /// Tells the probes what the worker sees of the containers now.
    pub(super) fn show_probes(&self, observed: &Observed) {
        let Some(Some(prober)) = &self.prober else {
            return;
        };
        let targets: Targets = observed
            .containers
            .iter()
            .map(|(name, (c, _))| {
                let target = ContainerTarget {
                    id: c.id.clone(),
                    running: c.state == ContainerState::Running,
                    started_at: c.started_at,
                };
                (name.clone(), target)
            })
            .collect();
        prober.saw(targets);
    }

    /// Kills the container of `kill`, whose probe failed.
    pub(super) async fn kill_for_probe(&self, pod: &Pod, kill: &ProbeKill) {
        let kind = containers(pod)
            .into_iter()
            .find(|(c, _)| c.name == kill.name)
            .map_or(ContainerKind::App, |(_, k)| k);
        let probe = match kill.probe {
            ProbeKind::Startup => "startup",
            _ => "liveness",
        };
        let message = match kind {
            ContainerKind::App if kill.restart => {
                format!(
                    "Container {} failed {probe} probe, will be restarted",
                    kill.name
                )
            }
            ContainerKind::App => format!("Container {} failed {probe} probe", kill.name),
            _ => format!("Init container {} failed {probe} probe", kill.name),
        };
        let pod_grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        let probe_grace = match &self.prober {
            Some(Some(prober)) => prober
                .spec(&kill.name, kill.probe)
                .and_then(|s| s.termination_grace),
            _ => None,
        };
        let grace = match pod_grace {
            Some(pod_grace) => probe_grace.unwrap_or(pod_grace),
            None => 0,
        };
        let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(0)).max(MINIMUM_GRACE);
        tracing::info!(container = %kill.name, probe, ?grace, "{message}");
        let events = self.context.pod_events.clone();
        let pod_ref = self.pod_ref.clone();
        let path = field_path(&kill.name, kind);
        tokio::spawn(async move {
            events
                .on_container(&pod_ref, &path, "Normal", KILLING, &message)
                .await;
        });
        if let Err(e) = self.context.runtime.stop_container(&kill.id, grace).await {
            tracing::warn!(container = %kill.name, error = %e, "cannot stop the container whose probe failed; trying again");
        }
    }
}

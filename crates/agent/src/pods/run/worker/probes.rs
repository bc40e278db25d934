//! A worker's side of its pod's probes: they are started at its first
//! look (the kubelet makes them when it first syncs the pod), told what
//! the worker sees of each container, read for each round's plan, and a
//! container whose liveness or startup probe failed is killed as the
//! kubelet kills it: a `Killing` Event ("Container app failed liveness
//! probe, will be restarted"), its `preStop` hook, then a stop with a
//! deletion's grace period, else the probe's own when it has one, else
//! the pod's (at least 2 s). A running container whose spec changed (its
//! image) is killed the same way, with the pod's grace ("Container app
//! definition changed, will be restarted"; "Init container proxy
//! definition changed" for a sidecar), to be made again.

use k8s_openapi::api::core::v1::Pod;

use super::Worker;
use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;
use crate::pods::run::pod_sync::{Kill, KillCause, Observed, ProbeVerdicts};
use crate::pods::run::probes::{ContainerTarget, PodProber, ProbeContext, ProbeKind, Targets};
use crate::pods::teardown::kill_container::ContainerKill;
use crate::runtime::ContainerState;

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
            metrics: self.context.prober_metrics.clone(),
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

    /// Kills the container of `kill`, whose probe failed or whose spec
    /// changed.
    pub(super) async fn kill_running(&self, pod: &Pod, kill: &Kill) {
        let kind = containers(pod)
            .into_iter()
            .find(|(c, _)| c.name == kill.name)
            .map_or(ContainerKind::App, |(_, k)| k);
        let (why, probe) = match kill.cause {
            KillCause::Probe(ProbeKind::Startup) => {
                ("failed startup probe", Some(ProbeKind::Startup))
            }
            KillCause::Probe(probe) => ("failed liveness probe", Some(probe)),
            KillCause::DefinitionChanged => ("definition changed", None),
        };
        let message = match kind {
            ContainerKind::App if kill.restart => {
                format!("Container {} {why}, will be restarted", kill.name)
            }
            ContainerKind::App => format!("Container {} {why}", kill.name),
            _ => format!("Init container {} {why}", kill.name),
        };
        let pod_grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        let probe_grace = match (&self.prober, probe) {
            (Some(Some(prober)), Some(probe)) => prober
                .spec(&kill.name, probe)
                .and_then(|s| s.termination_grace),
            _ => None,
        };
        // A deletion's grace first, as the kubelet's
        // `setTerminationGracePeriod`.
        let grace = match (pod.metadata.deletion_grace_period_seconds, pod_grace) {
            (Some(deletion), _) => deletion,
            (None, Some(pod_grace)) => probe_grace.unwrap_or(pod_grace),
            (None, None) => 0,
        };
        tracing::info!(container = %kill.name, grace, "{message}");
        let killer = self.killer(pod).await;
        let stop = ContainerKill {
            id: &kill.id,
            name: &kill.name,
            message: Some(&message),
            grace,
            order: None,
        };
        if let Err(e) = killer.kill(&stop).await {
            tracing::warn!(container = %kill.name, error = %e, "cannot stop the container ({why}); trying again");
        }
    }
}

//! A pod's container probes, as the kubelet's prober runs them: one task
//! per probe of each app container and sidecar (startup, readiness,
//! liveness; exec, HTTP, TCP or gRPC), each on its own period, following
//! the containers as the pod's worker sees them and keeping their results
//! by container id. A result that changes wakes the worker, which shows
//! it (a container's `started` and `ready`, the pod's `ContainersReady`
//! and `Ready`) and acts on it (a container whose liveness or startup
//! probe failed is killed, and restarted as its restart policy says).
//!
//! | file | what |
//! |---|---|
//! | `spec` | a container's probes as the kubelet reads them |
//! | `probe_loop` | one probe's rounds: timing, hold, thresholds |
//! | `handler` | one probe run: its handler, retries, result and Event |
//! | `exec`, `http`, `tcp`, `grpc` | the four handlers |
//! | `results` | the results by container, and what they make of it |
//! | `metrics` | the probes' metrics (`/metrics/probes`) |
//! | `verdict` | what a handler answers, in the words shared with Go |

mod exec;
mod grpc;
mod handler;
pub(crate) mod http;
mod metrics;
mod probe_loop;
mod results;
pub(crate) mod spec;
mod tcp;
pub(crate) mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

pub(crate) use self::metrics::ProberMetrics;
pub(crate) use self::probe_loop::{ContainerTarget, ProbeContext, Targets};
pub(crate) use self::results::{Adopted, Probed, Results};
pub(crate) use self::spec::{ProbeKind, ProbeSpec, probes_of};
use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;

/// How long before the agent's start a container must have started to
/// keep what its status said (the kubelet's `kubeletRestartGracePeriod`).
const RESTART_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The probes of one pod, stopped when dropped.
pub(crate) struct PodProber {
    targets: watch::Sender<Targets>,
    results: Results,
    specs: BTreeMap<String, Vec<ProbeSpec>>,
    /// Stops the liveness and startup probes alone.
    liveness_and_startup: CancellationToken,
    _stop: DropGuard,
}

impl PodProber {
    /// The probes of `pod`'s app containers and sidecars, started; none
    /// when it has none. `agent_started` is when the agent started (a
    /// container that ran before it keeps its status's `started` and
    /// `ready` until its probes answer).
    pub(crate) fn start(
        pod: &Pod,
        context: impl FnOnce(Results) -> ProbeContext,
        agent_started: SystemTime,
    ) -> Option<Self> {
        let probed: Vec<_> = containers(pod)
            .into_iter()
            .filter(|(_, kind)| *kind != ContainerKind::Init)
            .map(|(c, kind)| (c.name.clone(), field_path(&c.name, kind), probes_of(c)))
            .filter(|(_, _, probes)| !probes.is_empty())
            .collect();
        let specs: BTreeMap<String, Vec<ProbeSpec>> = probed
            .iter()
            .map(|(name, _, probes)| (name.clone(), probes.clone()))
            .collect();
        if specs.is_empty() {
            return None;
        }
        let kinds: BTreeMap<String, BTreeSet<ProbeKind>> = specs
            .iter()
            .map(|(name, probes)| (name.clone(), probes.iter().map(|p| p.kind).collect()))
            .collect();
        let results = Results::new(kinds, adopted(pod, agent_started));
        let context = context(results.clone());
        let (targets, _) = watch::channel(Targets::new());
        let stop = CancellationToken::new();
        let liveness_and_startup = stop.child_token();
        for (name, path, probes) in probed {
            for spec in probes {
                let stop = match spec.kind {
                    ProbeKind::Readiness => stop.child_token(),
                    _ => liveness_and_startup.child_token(),
                };
                tokio::spawn(probe_loop::probe_loop(
                    context.clone(),
                    name.clone(),
                    path.clone(),
                    spec,
                    targets.subscribe(),
                    stop,
                ));
            }
        }
        Some(Self {
            targets,
            results,
            specs,
            liveness_and_startup,
            _stop: stop.drop_guard(),
        })
    }

    /// Stops the liveness and startup probes; the readiness probes go on
    /// (the kubelet's `StopLivenessAndStartup`, when a pod terminates).
    pub(crate) fn stop_liveness_and_startup(&self) {
        self.liveness_and_startup.cancel();
    }

    /// The containers as the worker sees them now.
    pub(crate) fn saw(&self, targets: Targets) {
        self.targets.send_replace(targets);
    }

    /// The results, to wait on and read.
    pub(crate) fn results(&self) -> &Results {
        &self.results
    }

    /// Probe `kind` of container `name`.
    pub(crate) fn spec(&self, name: &str, kind: ProbeKind) -> Option<&ProbeSpec> {
        self.specs.get(name)?.iter().find(|s| s.kind == kind)
    }
}

/// Where container `name` of `kind` is in its pod, as an Event names it.
pub(crate) fn field_path(name: &str, kind: ContainerKind) -> String {
    match kind {
        ContainerKind::App => format!("spec.containers{{{name}}}"),
        _ => format!("spec.initContainers{{{name}}}"),
    }
}

/// What the pod's status says of its running containers that started
/// before the agent did (by more than [`RESTART_GRACE`]).
fn adopted(pod: &Pod, agent_started: SystemTime) -> BTreeMap<String, Adopted> {
    let Some(status) = pod.status.as_ref() else {
        return BTreeMap::new();
    };
    let pod_ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let before = agent_started
        .checked_sub(RESTART_GRACE)
        .unwrap_or(agent_started);
    status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .filter_map(|c| {
            let running = c.state.as_ref()?.running.as_ref()?;
            let started_at = SystemTime::from(running.started_at.as_ref()?.0);
            if started_at >= before {
                return None;
            }
            let id = c.container_id.as_deref()?;
            let id = id.split_once("://").map_or(id, |(_, id)| id);
            Some((
                c.name.clone(),
                Adopted {
                    container_id: id.to_string(),
                    started: c.started.unwrap_or(false),
                    ready: c.ready && pod_ready,
                },
            ))
        })
        .collect()
}

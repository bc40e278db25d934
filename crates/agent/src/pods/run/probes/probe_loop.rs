//! One probe of one container, run as the kubelet's probe worker runs it:
//! when the agent started less than a period ago, first a random wait of
//! up to a period (so that the node's probes do not all come at once);
//! then a probe at once and every period after. Each probe looks at the
//! container as the pod's worker last saw it:
//!
//! - a newer container: the older one's result is forgotten, the newer one
//!   gets the first value (readiness failure, liveness success, startup
//!   unknown) unless it was adopted, and the probe is no longer on hold;
//! - on hold (after a liveness failure, or any startup result): nothing
//!   until a newer container;
//! - not running: a failure, without running the probe;
//! - within its initial delay (whole seconds since it started): nothing;
//! - a startup probe of a started container, or a liveness or readiness
//!   probe of one not started yet: nothing;
//! - else the probe runs; its Event is recorded on the container, its
//!   result counted in the probes' metrics; the result counts towards its
//!   threshold (the counts carry over to a newer container, as the
//!   kubelet's), and once there it is the container's.
//!
//! When the probe stops, its metrics' series are removed.
//!
//! A readiness probe also runs at once, its period starting again, when
//! the pod's worker saw the pod again and the container runs, started and
//! is not ready: a container is ready as soon as it answers, not a period
//! later.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::handler::{ProbeRun, Target, run_probe};
use super::metrics::ProberMetrics;
use super::results::Results;
use super::spec::{ProbeKind, ProbeSpec};
use crate::pods::kube_events::PodEvents;
use crate::pods::pod::PodRef;
use crate::runtime::ContainerRuntime;

/// A container as the pod's worker last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerTarget {
    /// Its latest container's runtime id.
    pub(crate) id: String,
    pub(crate) running: bool,
    pub(crate) started_at: Option<SystemTime>,
}

/// The pod's containers by name, as its worker last saw them.
pub(crate) type Targets = BTreeMap<String, ContainerTarget>;

/// What every probe of a pod shares.
#[derive(Clone)]
pub(crate) struct ProbeContext {
    pub(crate) runtime: Arc<dyn ContainerRuntime>,
    pub(crate) pod: PodRef,
    /// The pod's address.
    pub(crate) pod_ip: String,
    pub(crate) events: PodEvents,
    pub(crate) results: Results,
    /// When the agent started: probes made within a period of it wait a
    /// random part of their period first.
    pub(crate) agent_start: Instant,
    /// The node's probes' metrics.
    pub(crate) metrics: ProberMetrics,
}

/// Removes a probe's metrics' series when the probe stops.
struct ForgetOnStop<'a> {
    context: &'a ProbeContext,
    kind: ProbeKind,
    name: &'a str,
}

impl Drop for ForgetOnStop<'_> {
    fn drop(&mut self) {
        self.context
            .metrics
            .forget(self.kind, &self.context.pod, self.name);
    }
}

/// A probe's own state, carried from one run to the next.
#[derive(Debug, Default)]
struct State {
    container_id: Option<String>,
    on_hold: bool,
    last: Option<bool>,
    run: u32,
}

/// Runs probe `spec` of container `name` (at `field_path` in the pod)
/// until `stop`.
pub(crate) async fn probe_loop(
    context: ProbeContext,
    name: String,
    field_path: String,
    spec: ProbeSpec,
    mut targets: watch::Receiver<Targets>,
    stop: CancellationToken,
) {
    let _forget = ForgetOnStop {
        context: &context,
        kind: spec.kind,
        name: &name,
    };
    if context.agent_start.elapsed() < spec.period {
        let wait = spec.period.mul_f64(rand::random::<f64>());
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
    let mut ticker = tokio::time::interval(spec.period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut state = State::default();
    let mut watching = true;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
            changed = targets.changed(), if watching && spec.kind == ProbeKind::Readiness => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                if !wants_readiness(&context, &name, &targets.borrow()) {
                    continue;
                }
                ticker.reset();
            }
        }
        let target = targets.borrow().get(&name).cloned();
        if let Some(target) = target {
            tokio::select! {
                () = stop.cancelled() => return,
                () = probe_once(&context, (&name, &field_path), &spec, &target, &mut state) => {}
            }
        }
    }
}

/// Whether a readiness probe is due at once: its container runs, started,
/// and is not ready.
fn wants_readiness(context: &ProbeContext, name: &str, targets: &Targets) -> bool {
    targets.get(name).is_some_and(|t| {
        t.running
            && context.results.started(name, &t.id)
            && context.results.get(&t.id, ProbeKind::Readiness) != Some(true)
    })
}

/// One round of probe `spec` of container `name` (at `field_path`), seen
/// as `target`.
async fn probe_once(
    context: &ProbeContext,
    (name, field_path): (&str, &str),
    spec: &ProbeSpec,
    target: &ContainerTarget,
    state: &mut State,
) {
    let began = Instant::now();
    let results = &context.results;
    if state.container_id.as_deref() != Some(target.id.as_str()) {
        if let Some(old) = state.container_id.take() {
            results.remove(&old, spec.kind);
        }
        if !results.adopted(name, &target.id) {
            match spec.kind {
                ProbeKind::Readiness => results.set(&target.id, spec.kind, false),
                ProbeKind::Liveness => results.set(&target.id, spec.kind, true),
                ProbeKind::Startup => {}
            }
        }
        state.container_id = Some(target.id.clone());
        state.on_hold = false;
    }
    if state.on_hold {
        return;
    }
    if !target.running {
        results.set(&target.id, spec.kind, false);
        return;
    }
    let ran_for = target
        .started_at
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .unwrap_or_default();
    if i64::try_from(ran_for.as_secs()).unwrap_or(i64::MAX) < spec.initial_delay {
        return;
    }
    let started = results.started(name, &target.id);
    if (spec.kind == ProbeKind::Startup) == started {
        return;
    }
    let probe = Target {
        runtime: context.runtime.as_ref(),
        container_id: &target.id,
        pod_ip: &context.pod_ip,
    };
    let ProbeRun { success, event } = run_probe(spec, &probe).await;
    if let Some((reason, message)) = event {
        let _span = context.pod.span("probe").entered();
        tracing::debug!(container = %name, probe = spec.kind.as_str(), %message, "probe");
        record(context, field_path, reason, message);
    }
    let Some(success) = success else {
        return;
    };
    context
        .metrics
        .observed(spec.kind, &context.pod, name, success, began.elapsed());
    if counted(state, success, spec) {
        results.set(&target.id, spec.kind, success);
        if (spec.kind == ProbeKind::Liveness && !success) || spec.kind == ProbeKind::Startup {
            state.on_hold = true;
            state.run = 0;
        }
    }
}

/// Counts `success` in `state`'s run: whether the run reached its
/// threshold (the result then stands).
fn counted(state: &mut State, success: bool, spec: &ProbeSpec) -> bool {
    if state.last == Some(success) {
        state.run = state.run.saturating_add(1);
    } else {
        state.last = Some(success);
        state.run = 1;
    }
    let threshold = if success {
        spec.success_threshold
    } else {
        spec.failure_threshold
    };
    state.run >= threshold
}

/// Records a probe's Warning on the container at `field_path`, in the
/// background.
fn record(context: &ProbeContext, field_path: &str, reason: &'static str, message: String) {
    let events = context.events.clone();
    let pod = context.pod.clone();
    let field_path = field_path.to_string();
    tokio::spawn(async move {
        events
            .on_container(&pod, &field_path, "Warning", reason, &message)
            .await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::pods::run::probes::spec::Action;

    fn spec(success_threshold: u32, failure_threshold: u32) -> ProbeSpec {
        ProbeSpec {
            kind: ProbeKind::Readiness,
            action: Action::Missing,
            initial_delay: 0,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold,
            failure_threshold,
            termination_grace: None,
        }
    }

    #[test]
    fn a_result_stands_once_its_run_reaches_the_threshold() {
        let spec = spec(2, 3);
        let mut state = State::default();
        assert!(!counted(&mut state, false, &spec));
        assert!(!counted(&mut state, false, &spec));
        assert!(
            !counted(&mut state, true, &spec),
            "a success breaks the run"
        );
        assert!(counted(&mut state, true, &spec));
        assert!(counted(&mut state, true, &spec), "and keeps standing");
        assert!(!counted(&mut state, false, &spec));
        assert!(!counted(&mut state, false, &spec));
        assert!(counted(&mut state, false, &spec));
    }
}

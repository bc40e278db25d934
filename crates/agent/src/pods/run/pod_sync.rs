//! What a running pod's containers need next, decided from what the
//! runtime shows, as the kubelet's `computePodActions` and `getPhase`
//! decide it. Pure: the pod's worker observes, asks this, and does what it
//! says.
//!
//! - No ready sandbox: a new one first (its containers, if any, start
//!   over: init containers run again), unless the pod's `restartPolicy`
//!   is `Never` and its containers ran, or `OnFailure` and every app
//!   container succeeded: it then ends as they did. In a new sandbox an
//!   `OnFailure` pod's app container that succeeded is not run again.
//! - Init containers one after another: a regular one must exit 0 before
//!   the next starts (one that fails is restarted unless the pod's
//!   `restartPolicy` is `Never`, which fails the pod); a restartable one (a
//!   sidecar) must be running, and is restarted whenever it stops. Once an
//!   app container was made in the sandbox the pod stays initialized: a
//!   sidecar restarting then holds nothing back.
//! - Then every app container not running is started, or restarted as its
//!   `restartPolicyRules` and `restartPolicy` say, else the pod's
//!   (`Always`; `OnFailure` for a non-zero exit; `Never`: see
//!   `restart_rules`), each restart after the container's crash-loop
//!   back-off.
//! - A running app container or sidecar whose spec changed (its image:
//!   the kubelet's `containerChanged`, by the hash of its name and image)
//!   is killed and made again, whatever the `restartPolicy`, without the
//!   back-off of the one it replaces.
//! - The phase: `Pending` until initialized and while a container was
//!   never started; `Running` while one runs (or one restarts);
//!   `Succeeded` when every app container exited 0 and none restarts;
//!   `Failed` when none restarts and one failed, or an init container
//!   failed and is not restarted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;
use crate::pods::run::crash_backoff::{CrashBackoff, backoff_key};
use crate::pods::run::probes::{ProbeKind, Probed};
use crate::pods::run::restart_rules::{restarts_after_probe_kill, should_restart};
use crate::pods::run_options::runtime_spec::container_hash;
use crate::runtime::{ContainerState, ContainerStatus, SandboxStatus};

/// The kubelet's waiting reason of a container not made yet.
pub(crate) const CONTAINER_CREATING: &str = "ContainerCreating";
/// The kubelet's waiting reason of a container whose init containers have
/// not all finished.
pub(crate) const POD_INITIALIZING: &str = "PodInitializing";
/// The kubelet's waiting reason of a container waiting out its back-off.
pub(crate) const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

/// The pod's phase, as the API has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApiPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl ApiPhase {
    /// The API's word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// Whether the pod ended: nothing restarts any more.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// What the runtime shows of the pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// Its latest sandbox.
    pub(crate) sandbox: Option<SandboxStatus>,
    /// Container name → its latest container in that sandbox, and the one
    /// before it (the kubelet's last state).
    pub(crate) containers: BTreeMap<String, (ContainerStatus, Option<ContainerStatus>)>,
    /// Container name → the attempt after its latest container in any of
    /// the pod's sandboxes: a container made again in a new sandbox goes
    /// on counting its restarts.
    pub(crate) next_attempts: BTreeMap<String, u32>,
    /// Container name → its latest container, ended in an earlier sandbox,
    /// for the containers not in the latest one: an `OnFailure` pod's app
    /// container that succeeded is not run again in a new sandbox.
    pub(crate) ended_before: BTreeMap<String, ContainerStatus>,
}

/// One container as the pod's status shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContainerView {
    pub(crate) name: String,
    pub(crate) kind: ContainerKind,
    /// Its latest container.
    pub(crate) current: Option<ContainerStatus>,
    /// The one before.
    pub(crate) previous: Option<ContainerStatus>,
    /// Why it does not run (shown instead of `current` when it is to be
    /// made, or restarted).
    pub(crate) waiting: Option<(String, String)>,
    /// What its probes say of its latest container, while it runs.
    pub(crate) probed: Probed,
}

impl ContainerView {
    /// Whether its process runs.
    pub(crate) fn running(&self) -> bool {
        self.waiting.is_none()
            && self
                .current
                .as_ref()
                .is_some_and(|c| c.state == ContainerState::Running)
    }

    /// Whether it runs and started: its startup probe succeeded, or it
    /// has none.
    pub(crate) fn started(&self) -> bool {
        self.running() && !self.probed.not_started
    }

    /// Whether it is ready: started, and its readiness probe succeeded
    /// (or it has none).
    pub(crate) fn ready(&self) -> bool {
        self.started() && !self.probed.not_ready
    }

    /// Its restart count: its latest container's attempt.
    pub(crate) fn restart_count(&self) -> u32 {
        self.current.as_ref().map_or(0, |c| c.attempt)
    }
}

/// A container to make and start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) name: String,
    /// Its attempt: 0, or the one after its latest container's.
    pub(crate) attempt: u32,
    /// A restart of the container that exited then, which counts
    /// against its back-off.
    pub(crate) restart: Option<SystemTime>,
}

/// Why a running container is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KillCause {
    /// This probe of it failed.
    Probe(ProbeKind),
    /// Its spec changed since it was made (its image): it is made again.
    DefinitionChanged,
}

/// A running container to kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kill {
    pub(crate) name: String,
    /// Its runtime id.
    pub(crate) id: String,
    pub(crate) cause: KillCause,
    /// Whether it is started again (its restart policy is not `Never`, or
    /// its spec changed).
    pub(crate) restart: bool,
}

/// What to do now, and what the status shows.
#[derive(Debug, Clone)]
pub(crate) struct SyncPlan {
    /// A new sandbox first, of this attempt.
    pub(crate) sandbox: Option<u32>,
    /// Containers to kill first (a probe failed, or their spec changed).
    pub(crate) kill: Vec<Kill>,
    /// Containers to start, in order.
    pub(crate) start: Vec<Start>,
    /// When a back-off ends.
    pub(crate) wake_at: Option<SystemTime>,
    pub(crate) phase: ApiPhase,
    /// Whether every init container finished (sidecars started).
    pub(crate) initialized: bool,
    /// Init containers first, in spec order.
    pub(crate) containers: Vec<ContainerView>,
}

impl SyncPlan {
    /// Nothing more to do: nothing killed or started, no back-off to wake
    /// for, and each container shown as the runtime has it (a pod that
    /// stops, or stopped).
    pub(crate) fn settle(&mut self) {
        self.start.clear();
        self.kill.clear();
        self.wake_at = None;
        for view in &mut self.containers {
            if view.current.is_some() {
                view.waiting = None;
            }
        }
    }
}

/// Why a container could not be started last time: (reason, message),
/// shown as its waiting state until a start succeeds.
pub(crate) type StartErrors = BTreeMap<String, (String, String)>;

/// What the probes say of each container's latest container, by name.
pub(crate) type ProbeVerdicts = BTreeMap<String, Probed>;

/// The runtime ids of the containers killed because their spec changed:
/// each is made again once, whatever the pod's `restartPolicy` (the
/// kubelet kills and starts it in one `SyncPod`).
pub(crate) type Replaced = BTreeSet<String>;

/// Decides what `pod` needs now that the runtime shows `observed` and its
/// probes say `probed`; the containers of `replaced` were killed to be
/// made again.
pub(crate) fn plan(
    pod: &Pod,
    observed: &Observed,
    probed: &ProbeVerdicts,
    backoff: &CrashBackoff,
    start_errors: &StartErrors,
    replaced: &Replaced,
    now: SystemTime,
) -> SyncPlan {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
        .to_string();
    let mut plan = SyncPlan {
        sandbox: None,
        kill: Vec::new(),
        start: Vec::new(),
        wake_at: None,
        phase: ApiPhase::Pending,
        initialized: false,
        containers: Vec::new(),
    };
    let all = containers(pod);
    let sandbox_ready = observed.sandbox.as_ref().is_some_and(|s| s.ready);
    if !sandbox_ready {
        if policy == "Never" && observed.sandbox.is_some() && !observed.containers.is_empty() {
            // Its containers ran and are not to run again: no new sandbox,
            // and the pod ends with them, as the kubelet's
            // `computePodActions` decides for a pod that does not restart.
            return terminal_plan(pod, observed, now);
        }
        if policy == "OnFailure" && observed.sandbox.is_some() && all_apps_succeeded(&all, observed)
        {
            // Nothing is left to run: no new sandbox either.
            return terminal_plan(pod, observed, now);
        }
        plan.sandbox = Some(observed.sandbox.as_ref().map_or(0, |s| s.attempt + 1));
        let has_init = all.iter().any(|(_, k)| *k != ContainerKind::App);
        // With no init container to run, the pod is initialized already.
        plan.initialized = !has_init;
        for (container, kind) in &all {
            let reason = if *kind != ContainerKind::App || has_init {
                POD_INITIALIZING
            } else {
                CONTAINER_CREATING
            };
            plan.containers.push(ContainerView {
                name: container.name.clone(),
                kind: *kind,
                current: None,
                previous: None,
                waiting: Some((reason.into(), String::new())),
                probed: Probed::default(),
            });
        }
        return plan;
    }

    let ctx = Decide {
        pod,
        specs: all.iter().map(|(c, _)| (c.name.as_str(), *c)).collect(),
        observed,
        probed,
        backoff,
        start_errors,
        replaced,
        now,
    };
    let mut views: BTreeMap<String, ContainerView> = BTreeMap::new();
    let mut wake_at: Option<SystemTime> = None;
    let mut kills = Vec::new();
    let specs = &ctx.specs;
    let mut decide = |name: &str, kind: ContainerKind, restarts_on: &dyn Fn(i32) -> bool| {
        let (view, start, wake) = ctx.container(name, kind, restarts_on);
        if let Some(at) = wake {
            wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
        }
        if let Some(current) = view.current.as_ref().filter(|_| view.running()) {
            // A regular init container runs to its end whatever its spec
            // says now, as the kubelet's.
            let cause = if kind != ContainerKind::Init && ctx.changed(current) {
                Some(KillCause::DefinitionChanged)
            } else {
                view.probed.kill.map(KillCause::Probe)
            };
            if let Some(cause) = cause {
                kills.push(Kill {
                    name: name.to_string(),
                    id: current.id.clone(),
                    cause,
                    // Made again for its new spec; after a probe's kill, as
                    // its restart policy says.
                    restart: cause == KillCause::DefinitionChanged
                        || kind == ContainerKind::Sidecar
                        || specs
                            .get(name)
                            .is_none_or(|spec| restarts_after_probe_kill(spec, &policy)),
                });
            }
        }
        (view, start)
    };

    // Once an app container was made in this sandbox the pod has been
    // initialized (the kubelet's `HasAnyActiveRegularContainerStarted`):
    // its regular init containers are not looked at again, and a sidecar
    // that stops is restarted while the app containers go on.
    let initialized_before = all
        .iter()
        .any(|(c, k)| *k == ContainerKind::App && observed.containers.contains_key(&c.name));
    // Init containers, one at a time.
    let mut initialized = true;
    let mut failed_init = false;
    for (container, kind) in all.iter().filter(|(_, k)| *k != ContainerKind::App) {
        let name = container.name.as_str();
        if initialized_before {
            if *kind == ContainerKind::Sidecar {
                // A sidecar whose spec changed is made again too.
                let (view, start) = decide(name, *kind, &|_| true);
                plan.start.extend(start);
                views.insert(name.into(), view);
            } else {
                views.insert(name.into(), as_observed(name, *kind, observed));
            }
            continue;
        }
        if !initialized {
            views.insert(name.into(), as_observed(name, *kind, observed));
            continue;
        }
        let restarts_on = |code: i32| code != 0 && should_restart(container, &policy, code);
        let (view, start) = match kind {
            ContainerKind::Sidecar => decide(name, *kind, &|_| true),
            _ => decide(name, *kind, &restarts_on),
        };
        let done = match kind {
            ContainerKind::Sidecar => view.started(),
            _ => {
                view.current
                    .as_ref()
                    .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == Some(0))
                    && view.waiting.is_none()
            }
        };
        if *kind == ContainerKind::Init
            && view.current.as_ref().is_some_and(|c| {
                c.state == ContainerState::Exited
                    && c.exit_code != Some(0)
                    && !restarts_on(c.exit_code.unwrap_or(-1))
            })
        {
            failed_init = true;
        }
        if let Some(start) = start {
            plan.start.push(start);
        }
        if !done {
            initialized = false;
        }
        views.insert(name.into(), view);
    }
    plan.initialized = initialized;

    // App containers.
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    // Of the stopped, those not to restart.
    let mut ended = 0;
    for (container, _) in all.iter().filter(|(_, k)| *k == ContainerKind::App) {
        let name = container.name.as_str();
        if !initialized || failed_init {
            views.insert(
                name.into(),
                ContainerView {
                    name: name.into(),
                    kind: ContainerKind::App,
                    current: None,
                    previous: None,
                    waiting: Some((POD_INITIALIZING.into(), String::new())),
                    probed: Probed::default(),
                },
            );
            continue;
        }
        let restarts_on = |code: i32| should_restart(container, &policy, code);
        let (view, start) = decide(name, ContainerKind::App, &restarts_on);
        let replacing = observed
            .containers
            .get(name)
            .is_some_and(|(c, _)| replaced.contains(&c.id));
        match (&view.waiting, &view.current) {
            // Killed to be made again at once: it goes on.
            _ if replacing => running += 1,
            (None, Some(c)) if c.state == ContainerState::Running => running += 1,
            (None, Some(c)) if c.state == ContainerState::Exited => {
                stopped += 1;
                if c.exit_code == Some(0) {
                    succeeded += 1;
                }
                if !restarts_on(c.exit_code.unwrap_or(-1)) {
                    ended += 1;
                }
            }
            (Some(_), _) if view.previous.is_some() => stopped += 1,
            _ => waiting += 1,
        }
        if let Some(start) = start {
            plan.start.push(start);
        }
        views.insert(name.into(), view);
    }

    plan.kill = kills;
    plan.wake_at = wake_at;
    plan.phase = if failed_init {
        ApiPhase::Failed
    } else if !initialized || waiting > 0 {
        ApiPhase::Pending
    } else if running > 0 {
        ApiPhase::Running
    } else if stopped > 0 {
        // The kubelet's `getPhase` with `ContainerRestartRules`.
        if stopped != ended {
            ApiPhase::Running
        } else if stopped == succeeded {
            ApiPhase::Succeeded
        } else {
            ApiPhase::Failed
        }
    } else {
        ApiPhase::Pending
    };
    if plan.phase.is_terminal() {
        // Nothing starts in a pod that ended; its sidecars are stopped.
        plan.start.clear();
        plan.kill.clear();
        plan.wake_at = None;
    }
    plan.containers = all
        .iter()
        .filter_map(|(c, _)| views.remove(c.name.as_str()))
        .collect();
    plan
}

/// Whether each app container of `all` (one at least) last exited 0, in
/// the latest sandbox or an earlier one.
fn all_apps_succeeded(all: &[(&Container, ContainerKind)], observed: &Observed) -> bool {
    let mut apps = all
        .iter()
        .filter(|(_, k)| *k == ContainerKind::App)
        .peekable();
    apps.peek().is_some()
        && apps.all(|(c, _)| {
            observed
                .containers
                .get(&c.name)
                .map(|(latest, _)| latest)
                .or_else(|| observed.ended_before.get(&c.name))
                .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == Some(0))
        })
}

/// Container `name` as the runtime last had it, nothing decided for it
/// (an init container after the one that runs, or once the pod was
/// initialized): `PodInitializing` when it was never made.
fn as_observed(name: &str, kind: ContainerKind, observed: &Observed) -> ContainerView {
    ContainerView {
        name: name.into(),
        kind,
        current: observed.containers.get(name).map(|(c, _)| c.clone()),
        previous: observed.containers.get(name).and_then(|(_, p)| p.clone()),
        waiting: (!observed.containers.contains_key(name))
            .then(|| (POD_INITIALIZING.into(), String::new())),
        probed: Probed::default(),
    }
}

/// What one container needs, from the pod's observation.
struct Decide<'a> {
    pod: &'a Pod,
    /// The pod's containers, by name.
    specs: BTreeMap<&'a str, &'a Container>,
    observed: &'a Observed,
    probed: &'a ProbeVerdicts,
    backoff: &'a CrashBackoff,
    start_errors: &'a StartErrors,
    replaced: &'a Replaced,
    now: SystemTime,
}

impl Decide<'_> {
    /// Whether `current` was made from another spec than its container's
    /// now (the kubelet's `containerChanged`). A container without the
    /// hash annotation was not made by a kubelet: never.
    fn changed(&self, current: &ContainerStatus) -> bool {
        match (current.hash, self.specs.get(current.name.as_str())) {
            (Some(hash), Some(spec)) => hash != u64::from(container_hash(spec)),
            _ => false,
        }
    }

    /// Container `name`: how the status shows it, whether it starts now
    /// (`restarts_on` says whether an exit code restarts it), and when its
    /// back-off ends.
    fn container(
        &self,
        name: &str,
        kind: ContainerKind,
        restarts_on: &dyn Fn(i32) -> bool,
    ) -> (ContainerView, Option<Start>, Option<SystemTime>) {
        let mut wake = None;
        let (current, previous) = match self.observed.containers.get(name) {
            Some((c, p)) => (Some(c.clone()), p.clone()),
            // An app container that ended in an earlier sandbox and is not
            // to restart (an `OnFailure` pod's that succeeded) is shown as
            // it ended, not run again (the kubelet's `computePodActions`
            // for a new sandbox).
            None => match self.observed.ended_before.get(name) {
                Some(c)
                    if kind == ContainerKind::App && !restarts_on(c.exit_code.unwrap_or(-1)) =>
                {
                    (Some(c.clone()), None)
                }
                _ => (None, None),
            },
        };
        let mut view = ContainerView {
            name: name.to_string(),
            kind,
            current: current.clone(),
            previous,
            waiting: None,
            probed: match &current {
                Some(c) if c.state == ContainerState::Running => {
                    self.probed.get(name).copied().unwrap_or_default()
                }
                _ => Probed::default(),
            },
        };
        let start = match &current {
            None => Some(Start {
                name: name.into(),
                attempt: self.observed.next_attempts.get(name).copied().unwrap_or(0),
                restart: None,
            }),
            Some(c) if c.state == ContainerState::Running => None,
            Some(c) if c.state == ContainerState::Exited => {
                let code = c.exit_code.unwrap_or(-1);
                if !restarts_on(code) && !self.replaced.contains(&c.id) {
                    None
                } else {
                    let finished = c.finished_at.unwrap_or(self.now);
                    let key = self
                        .specs
                        .get(name)
                        .map_or_else(|| name.to_string(), |spec| backoff_key(spec));
                    match self.backoff.restart_at(&key, finished, self.now) {
                        Some((at, wait)) => {
                            wake = Some(at);
                            let pod_name = self.pod.metadata.name.clone().unwrap_or_default();
                            let namespace = self.pod.metadata.namespace.clone().unwrap_or_default();
                            let uid = self.pod.metadata.uid.clone().unwrap_or_default();
                            view.previous = Some(c.clone());
                            view.waiting = Some((
                                CRASH_LOOP_BACK_OFF.into(),
                                format!(
                                    "back-off {} restarting failed container={name} pod={pod_name}_{namespace}({uid})",
                                    go_duration(wait)
                                ),
                            ));
                            None
                        }
                        None => Some(Start {
                            name: name.into(),
                            attempt: c.attempt + 1,
                            restart: Some(finished),
                        }),
                    }
                }
            }
            // Made, never started (or unknown): made again.
            Some(c) => Some(Start {
                name: name.into(),
                attempt: c.attempt + 1,
                restart: None,
            }),
        };
        if let Some(start) = &start {
            if let Some(error) = self.start_errors.get(name) {
                view.waiting = Some(error.clone());
            } else if view.waiting.is_none() && view.current.is_none() {
                view.waiting = Some((CONTAINER_CREATING.into(), String::new()));
            }
            if start.restart.is_some()
                && let Some(c) = &current
            {
                view.previous = Some(c.clone());
                if view.waiting.is_none() {
                    view.waiting = Some((CONTAINER_CREATING.into(), String::new()));
                }
            }
        }
        (view, start, wake)
    }
}

/// What a pod's status shows once the kubelet stopped it for good (a node
/// shutdown): each container as the runtime last had it, nothing started
/// again, and the phase terminal, as `getPhase` decides it for a pod
/// that is: `Succeeded` when every app container exited 0, else `Failed`
/// (the status the kill asked for).
pub(crate) fn terminal_plan(pod: &Pod, observed: &Observed, now: SystemTime) -> SyncPlan {
    // The containers are read from their sandbox, stopped now.
    let mut stopped = observed.clone();
    if let Some(sandbox) = stopped.sandbox.as_mut() {
        sandbox.ready = true;
    }
    let mut plan = plan(
        pod,
        &stopped,
        &ProbeVerdicts::new(),
        &CrashBackoff::default(),
        &StartErrors::new(),
        &Replaced::new(),
        now,
    );
    plan.settle();
    if observed.sandbox.is_some() {
        plan.sandbox = None;
    }
    let mut apps = plan
        .containers
        .iter()
        .filter(|c| c.kind == ContainerKind::App)
        .peekable();
    let succeeded = apps.peek().is_some()
        && apps.all(|c| {
            c.current
                .as_ref()
                .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == Some(0))
        });
    plan.phase = if succeeded {
        ApiPhase::Succeeded
    } else {
        ApiPhase::Failed
    };
    plan
}

/// A duration as Go prints it (`10s`, `2m40s`, `5m0s`), as the kubelet's
/// back-off message shows it.
pub(crate) fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m{}s", s / 3600, (s % 3600) / 60, s % 60)
    }
}

#[cfg(test)]
#[path = "pod_sync/tests.rs"]
mod tests;

//! The pods owner's state machine: the pods it follows, what each does
//! next ([`Tracked`]), one operation per pod at a time on a `JoinSet`
//! (admitting then running its containers, or stopping them and giving
//! back: slow work outside the task, in `pods/lifecycle/operation.rs`, which tells
//! where it is on the way), and the reconcile of what the managers hold or
//! the runtime runs for pods the API no longer has as active.
//! [`PodsManager`](super::PodsManager) builds it and its tasks; the module
//! docs of `pods/manager.rs` tell the order it follows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use std::time::SystemTime;

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};
use nodeplugins_api::timer::sleep_until;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::event::{AgentEvent, EventKind};
use crate::pods::admit::admission::Admitted;
use crate::pods::admit::served::Served;
use crate::pods::admit::spec::{
    containers, device_requests, is_extended_resource, is_mirror, is_static, pod_ref,
};
use crate::pods::config::PodsConfig;
use crate::pods::kube_events::PodEvents;
use crate::pods::lifecycle::admission_gate::{AdmissionGate, GatePass};
use crate::pods::lifecycle::operation::{Lane, Operations, Outcome, Start};
use crate::pods::lifecycle::report::Report;
use crate::pods::lifecycle::shutdown_requests::{KillWait, ShutdownRequest};
use crate::pods::lifecycle::tracked::{Next, Tracked};
use crate::pods::lifecycle::watch::PodWatchEvent;
use crate::pods::pod::PodRef;
use crate::pods::snapshot::{PodStatus, PodsSnapshot};
use crate::pods::static_pods::source::{StaticPods, static_changed};
use crate::pods::teardown::release::{ReleaseError, ending_of};
use crate::pods::teardown::terminate::MINIMUM_GRACE;
use crate::published::Publisher;

/// One operation running for a pod.
pub(in crate::pods) struct Running {
    pub(super) uid: String,
    /// Where it is: admitting, running the pod, or giving back (its
    /// reports move it on).
    next: Next,
    /// A release of a pod that holds devices: admissions of pods that ask
    /// for devices wait for it, as the kubelet drops the devices of pods no
    /// longer active before it allocates.
    frees_devices: bool,
    /// An admission or a worker: cut short or told to stop through this,
    /// and given the pod's changes.
    pub(super) lane: Option<(CancellationToken, watch::Sender<Arc<Pod>>)>,
}

pub(in crate::pods) struct Owner {
    pub(in crate::pods) config: PodsConfig,
    /// What the pods' operations use.
    pub(in crate::pods) operations: Arc<Operations>,
    pub(in crate::pods) warnings: PodEvents,
    /// What operations and runtime listings tell.
    pub(in crate::pods) reports: mpsc::UnboundedReceiver<Report>,
    /// Pod UID → the pod.
    pub(in crate::pods) tracked: HashMap<String, Tracked>,
    /// Whether the pods were listed once: until then the reconcile gives
    /// nothing back (it cannot tell a pod gone from one not listed yet).
    pub(in crate::pods) listed: bool,
    pub(in crate::pods) ops: JoinSet<Outcome>,
    /// Each operation running.
    pub(in crate::pods) running: HashMap<Id, Running>,
    /// One pod's devices allocated at a time.
    pub(in crate::pods) gate: AdmissionGate,
    /// A due admission waits for the gate to open.
    pub(in crate::pods) gate_wanted: bool,
    /// What the plugins serve, to wake waiting pods when it grows.
    pub(in crate::pods) served: Served,
    pub(in crate::pods) watch: mpsc::UnboundedReceiver<PodWatchEvent>,
    /// Every pod bound to the node, as the watch keeps it.
    pub(in crate::pods) pods: Store<Pod>,
    /// The static pods, when the node has a static pod path.
    pub(in crate::pods) static_pods: Option<watch::Receiver<StaticPods>>,
    /// Rung when a mirror pod changed in the API.
    pub(in crate::pods) mirrors_changed: Arc<Notify>,
    /// The watch's failures in a row, each new error logged once.
    pub(in crate::pods) watch_failures: Retry<String>,
    pub(in crate::pods) backoff: Backoff,
    pub(in crate::pods) next_reconcile: Instant,
    /// Pods whose row is to be made again.
    pub(in crate::pods) dirty: HashSet<String>,
    pub(in crate::pods) rows: BTreeMap<String, Arc<PodStatus>>,
    pub(in crate::pods) generation: u64,
    pub(in crate::pods) snapshot: Publisher<PodsSnapshot>,
    pub(in crate::pods) events: broadcast::Sender<AgentEvent>,
    /// What the node shutdown manager asks.
    pub(in crate::pods) requests: mpsc::UnboundedReceiver<ShutdownRequest>,
    /// The node is shutting down: pods due for admission are refused.
    pub(in crate::pods) node_shutting_down: bool,
    /// The node shutdown's kills waited for.
    pub(in crate::pods) kill_waits: Vec<KillWait>,
    /// The watch, and Warnings being recorded.
    pub(in crate::pods) tasks: TaskTracker,
    pub(in crate::pods) shutdown: CancellationToken,
}

impl Owner {
    pub(in crate::pods) async fn run(&mut self) {
        let shutdown = self.shutdown.clone();
        let mut devices = self.operations.admitter.devices.changes();
        let mut drivers = self.operations.admitter.dra.registered();
        self.served = Served::of(
            &self.operations.admitter.devices.snapshot(),
            &drivers.borrow_and_update(),
        );
        devices.mark_unchanged();
        loop {
            // Where operations are first: a release that started holds
            // admissions back before any is started.
            while let Ok(report) = self.reports.try_recv() {
                self.on_report(report);
            }
            self.start_due();
            self.settle_kill_waits();
            if !self.dirty.is_empty() {
                self.publish();
            }
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(event) = self.watch.recv() => self.on_watch(event),
                () = static_changed(&mut self.static_pods) => self.on_static(),
                Some(report) = self.reports.recv() => self.on_report(report),
                Some(request) = self.requests.recv() => self.on_shutdown_request(request),
                Some(done) = self.ops.join_next_with_id(), if !self.ops.is_empty() => {
                    match done {
                        Ok((id, outcome)) => self.on_done(id, outcome),
                        Err(e) => self.on_panic(&e),
                    }
                }
                () = self.gate.opened(), if self.gate_wanted => self.gate_wanted = false,
                Ok(()) = devices.changed() => self.on_served(&drivers.borrow()),
                Ok(()) = drivers.changed() => self.on_served(&drivers.borrow_and_update()),
                () = sleep_until(deadline) => {
                    if Instant::now() >= self.next_reconcile {
                        self.reconcile();
                        self.list_runtime_pods();
                        self.next_reconcile = Instant::now() + self.config.reconcile_period;
                    }
                }
            }
        }
        // Operations cut short leave what they recorded: a prepare's claims
        // are recorded before its driver is called, so the next start (or
        // the reconcile) finishes or undoes them.
        self.ops.abort_all();
    }

    /// The earliest retry, or the reconcile once pods were listed.
    fn next_deadline(&self) -> Option<Instant> {
        // While admissions wait for a release that frees devices or for
        // the gate, a due admission is started when they end, not when
        // its retry falls due (waking for it would wake again at once).
        let freeing = self.freeing_devices();
        let retry = self
            .tracked
            .values()
            .filter(|t| {
                !(t.waits_for_admission() && (self.gate_wanted || (freeing && wants_devices(t))))
            })
            .filter_map(Tracked::retry_at)
            .min();
        let reconcile = self.listed.then_some(self.next_reconcile);
        retry.into_iter().chain(reconcile).min()
    }

    /// Starts what is due, and forgets pods gone that hold nothing. Before
    /// admitting, what pods no longer active hold is given back, as the
    /// kubelet's device manager drops them before each allocation.
    fn start_due(&mut self) {
        let now = Instant::now();
        if self
            .tracked
            .values()
            .any(|t| t.next(now) == Some(Next::Admit))
        {
            self.reconcile();
        }
        let mut releases = Vec::new();
        let mut admissions = Vec::new();
        let mut runs = Vec::new();
        for (uid, tracked) in &self.tracked {
            match tracked.next(now) {
                Some(Next::Release) => releases.push(uid.clone()),
                Some(Next::Run) => runs.push(uid.clone()),
                Some(Next::Admit) if !self.name_held(uid) => {
                    admissions.push((tracked.admission_order(), uid.clone()));
                }
                Some(Next::Admit) => {}
                None => {}
            }
        }
        for uid in releases {
            self.start_release(uid);
        }
        for uid in runs {
            self.start_worker(uid);
        }
        if self.node_shutting_down {
            for (_, uid) in admissions {
                self.refuse_while_shutting_down(&uid);
            }
            self.forget_gone();
            return;
        }
        // Devices that go back are free before a pod that asks for
        // devices is admitted; the others are admitted meanwhile, as the
        // kubelet admits them while a pod terminates.
        self.gate_wanted = false;
        let freeing = self.freeing_devices();
        // The oldest first; the others once it has its devices.
        admissions.sort();
        let admissions: Vec<String> = admissions
            .into_iter()
            .map(|(_, uid)| uid)
            .filter(|uid| !(freeing && self.tracked.get(uid).is_some_and(wants_devices)))
            .collect();
        let mut admissions = admissions.into_iter();
        if let Some(uid) = admissions.next() {
            match self.gate.try_pass() {
                Some(pass) => {
                    self.start_admission(uid, pass);
                    self.gate_wanted = admissions.next().is_some();
                }
                None => self.gate_wanted = true,
            }
        }
        self.forget_gone();
    }

    /// Forgets pods gone that hold nothing.
    fn forget_gone(&mut self) {
        let forgotten: Vec<String> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.forgettable())
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in forgotten {
            self.tracked.remove(&uid);
            self.dirty.insert(uid);
        }
    }

    /// Admits pod `uid`, its devices allocated with `pass` held; its
    /// operation goes on into its worker once it is admitted.
    fn start_admission(&mut self, uid: String, pass: GatePass) {
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        let Some(pod) = tracked.pod().cloned() else {
            return;
        };
        let (lane, sender) = lane(pod);
        let start = Start::Admit {
            pass,
            fresh: tracked.fresh(),
            lane,
        };
        tracked.started(Next::Admit);
        self.start(uid, start, Next::Admit, false, Some(sender));
    }

    /// Runs admitted pod `uid`'s containers (again: its worker failed).
    fn start_worker(&mut self, uid: String) {
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        let Some(pod) = tracked.pod().cloned() else {
            return;
        };
        let (lane, sender) = lane(pod);
        let admitted = Admitted {
            containers: tracked.containers().to_vec(),
            restored: tracked.restored(),
        };
        tracked.started(Next::Run);
        self.start(
            uid,
            Start::Run { admitted, lane },
            Next::Run,
            false,
            Some(sender),
        );
    }

    /// Gives back what pod `uid` holds.
    fn start_release(&mut self, uid: String) {
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        let mut ending = ending_of(tracked.pod().map(Arc::as_ref), tracked.in_api());
        if let Some(grace) = self.operations.kills.grace_of(&uid) {
            ending.grace = ending.grace.min(grace.max(MINIMUM_GRACE));
        }
        tracked.started(Next::Release);
        let frees_devices = self.frees_devices(&uid);
        self.start(
            uid,
            Start::Release(ending),
            Next::Release,
            frees_devices,
            None,
        );
    }

    /// Whether a release that frees devices runs.
    fn freeing_devices(&self) -> bool {
        self.running.values().any(|r| r.frees_devices)
    }

    /// Whether giving back what pod `uid` holds frees devices.
    fn frees_devices(&self, uid: &str) -> bool {
        !self
            .operations
            .admitter
            .devices
            .snapshot()
            .allocations_of(uid)
            .is_empty()
    }

    pub(super) fn start(
        &mut self,
        uid: String,
        start: Start,
        next: Next,
        frees_devices: bool,
        lane: Option<(CancellationToken, watch::Sender<Arc<Pod>>)>,
    ) {
        let Some(pod_ref) = self.tracked.get(&uid).map(|t| t.pod_ref().clone()) else {
            return;
        };
        let operations = self.operations.clone();
        let abort = self.ops.spawn(operations.run(pod_ref, start));
        let running = Running {
            uid: uid.clone(),
            next,
            frees_devices,
            lane,
        };
        self.running.insert(abort.id(), running);
        self.dirty.insert(uid);
    }

    /// Cuts short the admission of pod `uid`, or stops its worker, when it
    /// is no longer to be admitted (deleted, ended): its operation gives
    /// back what it got instead.
    pub(super) fn cancel_unwanted(&mut self, uid: &str) {
        let Some(tracked) = self.tracked.get(uid) else {
            return;
        };
        if tracked.wants_admission() {
            return;
        }
        for running in self.running.values() {
            if running.uid != uid || running.next == Next::Release {
                continue;
            }
            let Some((stop, _)) = &running.lane else {
                continue;
            };
            if stop.is_cancelled() {
                continue;
            }
            let _pod = tracked.pod_ref().span("owner").entered();
            if running.next == Next::Admit {
                tracing::info!("the pod is no longer to be admitted; its admission is cut short");
            } else {
                tracing::info!("the pod is no longer to run; its containers are to stop");
            }
            stop.cancel();
        }
    }

    /// What the plugins serve changed: when it grew, pods that wait or
    /// failed are tried again now.
    fn on_served(&mut self, drivers: &crate::dra::Routes) {
        let now = Served::of(&self.operations.admitter.devices.snapshot(), drivers);
        if self.served.grew_to(now) {
            for (uid, tracked) in &mut self.tracked {
                if tracked.room_made() {
                    self.dirty.insert(uid.clone());
                }
            }
        }
    }

    fn on_watch(&mut self, event: PodWatchEvent) {
        match event {
            PodWatchEvent::Listed => {
                let mut listed = HashSet::new();
                for pod in self.pods.state() {
                    if let Some(uid) = self.upsert(pod) {
                        listed.insert(uid);
                    }
                }
                let mut went = Vec::new();
                for (uid, tracked) in &mut self.tracked {
                    // Static pods are not the API's to end.
                    let from_file = tracked.pod().is_some_and(|p| is_static(p));
                    if !listed.contains(uid) && tracked.in_api() && !from_file {
                        tracked.gone(None);
                        went.push(uid.clone());
                    }
                }
                for uid in went {
                    self.cancel_unwanted(&uid);
                    self.dirty.insert(uid);
                }
                if !self.listed {
                    tracing::info!(pods = listed.len(), "pods bound to the node listed");
                }
                self.listed = true;
                self.watch_failures.succeeded();
                self.reconcile();
                self.list_runtime_pods();
                self.next_reconcile = Instant::now() + self.config.reconcile_period;
                self.mirrors_changed.notify_one();
                // Listed shows even when no pod changed.
                self.publish();
            }
            PodWatchEvent::Applied(pod) if is_mirror(&pod) => self.on_mirror(&pod),
            PodWatchEvent::Applied(pod) => {
                if let Some(uid) = self.upsert(pod.clone()) {
                    self.update_lanes(&uid, &pod);
                    self.cancel_unwanted(&uid);
                }
            }
            PodWatchEvent::Deleted(pod) if is_mirror(&pod) => self.on_mirror(&pod),
            PodWatchEvent::Deleted(pod) => {
                if let Some(pod_ref) = pod_ref(&pod)
                    && let Some(tracked) = self.tracked.get_mut(&pod_ref.uid)
                {
                    tracked.gone(Some(pod));
                    self.cancel_unwanted(&pod_ref.uid);
                    self.dirty.insert(pod_ref.uid);
                }
            }
            PodWatchEvent::Failed(e) => {
                let text = e.to_string();
                if self.watch_failures.record(text.clone()) == Said::NewError {
                    tracing::warn!(error = %text, "watching the node's pods failed; watching again with backoff");
                }
            }
        }
    }

    /// Follows `pod` as the API shows it now; returns its UID. A mirror
    /// pod is not followed.
    pub(super) fn upsert(&mut self, pod: Arc<k8s_openapi::api::core::v1::Pod>) -> Option<String> {
        let pod_ref = pod_ref(&pod)?;
        if is_mirror(&pod) {
            let _pod = pod_ref.span("owner").entered();
            tracing::debug!("a mirror pod: its static pod is not run here");
            return None;
        }
        let uid = pod_ref.uid.clone();
        match self.tracked.get_mut(&uid) {
            Some(tracked) => tracked.update(pod),
            None => {
                let tracked = Tracked::seen(pod, pod_ref, SystemTime::now());
                self.tracked.insert(uid.clone(), tracked);
            }
        }
        self.dirty.insert(uid.clone());
        Some(uid)
    }

    fn on_done(&mut self, id: Id, outcome: Outcome) {
        let Some(Running { uid, .. }) = self.running.remove(&id) else {
            return;
        };
        self.dirty.insert(uid.clone());
        let now = (Instant::now(), SystemTime::now());
        let backoff = self.backoff;
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        let pod = tracked.pod_ref().clone();
        let _pod = pod.span("owner").entered();
        match outcome {
            Outcome::NotAdmitted(e) => {
                let warning = tracked.not_admitted(&e, |n| backoff.delay(n), now);
                if e.is_wait() {
                    tracing::debug!(error = %e, "pod waits");
                    self.emit(EventKind::Waiting, &pod, Some(e.to_string()));
                } else {
                    self.emit(EventKind::AdmissionFailed, &pod, Some(e.message()));
                }
                if let Some(warning) = warning {
                    tracing::warn!(reason = %warning.reason, message = %warning.message, "pod not admitted; trying again with backoff");
                    let warnings = self.warnings.clone();
                    let shutdown = self.shutdown.clone();
                    self.tasks.spawn(async move {
                        tokio::select! {
                            () = shutdown.cancelled() => {}
                            () = warnings.warning(&pod, &warning.reason, &warning.message) => {}
                        }
                    });
                }
            }
            Outcome::Released(Ok(())) => {
                tracing::info!("what the pod held was given back");
                tracked.released();
                self.emit(EventKind::PodReleased, &pod, None);
                for (other, tracked) in &mut self.tracked {
                    if *other != uid && tracked.room_made() {
                        self.dirty.insert(other.clone());
                    }
                }
            }
            Outcome::AdmissionCut => tracked.admission_cancelled(),
            Outcome::RuntimeLost => {
                tracing::warn!(
                    "the runtime lost the pod's sandbox (a reboot, or its state wiped): its devices are allocated and its claims prepared again before its containers are made again"
                );
                tracked.runtime_lost();
            }
            Outcome::Abandoned => tracked.worker_ended(None),
            Outcome::Rejected(written) => tracked.rejected(written, |n| backoff.delay(n), now),
            Outcome::Released(Err(e)) => {
                tracing::warn!(error = %e, "what the pod held was not all given back; trying again with backoff");
                tracked.not_released(&e, |n| backoff.delay(n), now);
                self.emit(EventKind::ReleaseFailed, &pod, Some(e.to_string()));
            }
        }
    }

    /// An operation panicked (a bug: the pod is tried again with backoff,
    /// as what it was doing), or was aborted (only at shutdown).
    fn on_panic(&mut self, error: &tokio::task::JoinError) {
        let Some(Running { uid, next, .. }) = self.running.remove(&error.id()) else {
            return;
        };
        let now = (Instant::now(), SystemTime::now());
        let backoff = self.backoff;
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        self.dirty.insert(uid.clone());
        let _pod = tracked.pod_ref().span("owner").entered();
        tracing::error!(error = %error, "a pod's operation failed unexpectedly");
        match next {
            Next::Admit => {
                let message = format!("admission failed unexpectedly: {error}");
                tracked.admission_panicked(message, |n| backoff.delay(n), now);
            }
            Next::Run => {
                let message = format!("running the pod failed unexpectedly: {error}");
                tracked.worker_panicked(message, |n| backoff.delay(n), now);
            }
            Next::Release => {
                tracked.not_released(&ReleaseError::Panicked, |n| backoff.delay(n), now);
            }
        }
    }

    fn on_report(&mut self, report: Report) {
        match report {
            Report::Admitted { uid, admitted } => {
                let Some(tracked) = self.tracked.get_mut(&uid) else {
                    return;
                };
                let pod = tracked.pod_ref().clone();
                let _pod = pod.span("owner").entered();
                tracing::info!(
                    containers = admitted.containers.len(),
                    restored = admitted.restored,
                    "pod admitted"
                );
                tracked.admitted(admitted.containers, admitted.restored, SystemTime::now());
                tracked.started(Next::Run);
                self.moved_on(&uid, Next::Run, false);
                self.emit(EventKind::Admitted, &pod, None);
            }
            Report::Releasing { uid, ended } => {
                let Some(tracked) = self.tracked.get_mut(&uid) else {
                    return;
                };
                if let Some(phase) = ended {
                    let _pod = tracked.pod_ref().span("owner").entered();
                    tracing::info!(phase = phase.as_str(), "the pod ended");
                }
                tracked.worker_ended(ended);
                tracked.started(Next::Release);
                let frees_devices = self.frees_devices(&uid);
                self.moved_on(&uid, Next::Release, frees_devices);
            }
            Report::Phase { uid, phase } => {
                if let Some(tracked) = self.tracked.get_mut(&uid) {
                    tracked.phase_written(phase);
                    self.dirty.insert(uid);
                }
            }
            Report::RuntimePods(pods) => {
                if !self.listed {
                    return;
                }
                for pod_ref in pods {
                    if self.tracked.contains_key(&pod_ref.uid) {
                        continue;
                    }
                    let _pod = pod_ref.span("owner").entered();
                    tracing::info!("the runtime runs a pod the API no longer has; stopping it");
                    let uid = pod_ref.uid.clone();
                    self.tracked
                        .insert(uid.clone(), Tracked::orphan(pod_ref, SystemTime::now()));
                    self.dirty.insert(uid);
                }
            }
        }
    }

    /// Pod `uid`'s operation went on to `next`.
    fn moved_on(&mut self, uid: &str, next: Next, frees_devices: bool) {
        if let Some(running) = self.running.values_mut().find(|r| r.uid == uid) {
            running.next = next;
            running.frees_devices = frees_devices;
        }
        self.dirty.insert(uid.to_string());
    }

    fn emit(&self, kind: EventKind, pod: &PodRef, detail: Option<String>) {
        let _ = self.events.send(AgentEvent::pod(
            kind,
            &pod.namespace,
            &pod.name,
            &pod.uid,
            detail,
        ));
    }

    /// Publishes the pods: the rows of the pods that changed made again.
    pub(in crate::pods) fn publish(&mut self) {
        for uid in std::mem::take(&mut self.dirty) {
            match self.tracked.get(&uid) {
                Some(tracked) => {
                    let mut status = tracked.status();
                    if let Some(volumes) = &self.operations.releaser.volumes {
                        status.volumes = volumes.volumes_of(&uid);
                    }
                    self.rows.insert(uid, Arc::new(status));
                }
                None => {
                    self.rows.remove(&uid);
                }
            }
        }
        self.generation += 1;
        self.snapshot.publish(PodsSnapshot {
            running: true,
            listed: self.listed,
            generation: self.generation,
            pods: self.rows.clone(),
        });
    }
}

/// A lane to a new operation for `pod`, and the owner's end of it.
fn lane(pod: Arc<Pod>) -> (Lane, (CancellationToken, watch::Sender<Arc<Pod>>)) {
    let stop = CancellationToken::new();
    let (sender, receiver) = watch::channel(pod);
    let lane = Lane {
        pod: receiver,
        stop: stop.clone(),
    };
    (lane, (stop, sender))
}

/// Whether `tracked`'s pod asks for extended resources (devices a plugin
/// serves, or none does): its admission waits while devices go back.
fn wants_devices(tracked: &Tracked) -> bool {
    tracked.pod().is_some_and(|pod| {
        containers(pod)
            .into_iter()
            .any(|(c, _)| !device_requests(pod, c, is_extended_resource).is_empty())
    })
}

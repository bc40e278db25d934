//! The pods owner's task: it follows the pods bound to the node (the
//! watch), decides for each what to do next ([`Tracked`]), runs one
//! operation per pod at a time on a `JoinSet` (admitting or giving back:
//! slow work outside the task), and reconciles: whatever the device manager
//! or the DRA manager holds for a pod UID the API does not have as an
//! active pod is given back. It wakes for a watch event, the end of an
//! operation, a retry falling due, the admission gate opening, a plugin
//! serving more, and the reconcile period.
//!
//! Admissions follow the kubelet's order: pods that give devices back go
//! first and are waited for, then the due pods are admitted oldest
//! `creationTimestamp` first, one pod's devices at a time
//! ([`AdmissionGate`]). A pod deleted or ended while it is admitted has its
//! admission cut short and gives back what it got. Mirror pods
//! (`kubernetes.io/config.mirror`) are not the node's to run: the kubelet
//! runs their static pods from its own files, and never admits them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::timer::sleep_until;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::{AbortHandle, Id, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::admission::{AdmissionError, Admitter};
use super::admission_gate::AdmissionGate;
use super::claims::PodClaimsReader;
use super::config::PodsConfig;
use super::container::ContainerResources;
use super::handle::PodsHandle;
use super::held::held_pods;
use super::kube_events::PodEvents;
use super::pod::PodRef;
use super::release::{ReleaseError, release};
use super::served::Served;
use super::spec::{is_mirror, pod_ref};
use super::status::{PodStatus, PodsSnapshot};
use super::tracked::{Next, Tracked};
use super::watch::{PodWatchEvent, watch_pods};
use crate::device::DeviceHandle;
use crate::dra::DraHandle;
use crate::event::{AgentEvent, EventKind};
use crate::kube_api::Connection;

/// The pods owner's task. [`new`](Self::new) gives it with its
/// [`PodsHandle`]; [`run`](Self::run) it.
pub struct PodsManager {
    config: PodsConfig,
    admitter: Admitter,
    warnings: PodEvents,
    connection: watch::Receiver<Connection>,
    snapshot: watch::Sender<Arc<PodsSnapshot>>,
    changes: watch::Sender<u64>,
    events: broadcast::Sender<AgentEvent>,
}

impl PodsManager {
    /// The owner of the pods bound to `config`'s node, admitting them with
    /// `devices` and `dra` and reading them through `connection`, and its
    /// handle.
    pub fn new(
        config: PodsConfig,
        devices: DeviceHandle,
        dra: DraHandle,
        connection: watch::Receiver<Connection>,
    ) -> (Self, PodsHandle) {
        let snapshot = watch::channel(Arc::new(PodsSnapshot::default())).0;
        let changes = watch::channel(0).0;
        let events = broadcast::channel(1024).0;
        let claims = PodClaimsReader::new(
            connection.clone(),
            config.node_name.clone(),
            config.request_timeout,
        );
        let handle = PodsHandle {
            serving: config.serve,
            snapshot: snapshot.subscribe(),
            changes: changes.subscribe(),
            events: events.clone(),
            claims: claims.clone(),
            dra: dra.clone(),
        };
        let warnings = PodEvents::new(
            connection.clone(),
            config.node_name.clone(),
            config.request_timeout,
        );
        let manager = Self {
            admitter: Admitter {
                devices,
                dra,
                claims,
            },
            warnings,
            connection,
            snapshot,
            changes,
            events,
            config,
        };
        (manager, handle)
    }

    /// Serves the node's pods until `shutdown` (when the configuration
    /// says so; otherwise only publishes that it does not).
    pub async fn run(self, shutdown: CancellationToken) {
        if !self.config.serve {
            self.snapshot.send_replace(Arc::new(PodsSnapshot {
                running: true,
                ..PodsSnapshot::default()
            }));
            self.changes.send_modify(|c| *c += 1);
            shutdown.cancelled().await;
            return;
        }
        // What pods hold is only known once both managers read their
        // checkpoints; nothing is decided before.
        let started = async {
            self.admitter.devices.running_snapshot().await.ok()?;
            self.admitter.dra.loaded_claims().await.ok()
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            started = started => if started.is_none() { return },
        }
        let tasks = TaskTracker::new();
        let (watch_tx, watch_rx) = mpsc::unbounded_channel();
        tasks.spawn(watch_pods(
            self.connection.clone(),
            self.config.node_name.clone(),
            watch_tx,
            shutdown.clone(),
        ));
        tracing::info!(node = %self.config.node_name, "serving the node's pods");
        let backoff = Backoff::new(self.config.retry_initial, self.config.retry_max)
            .with_jitter(self.config.retry_jitter);
        let mut owner = Owner {
            next_reconcile: Instant::now() + self.config.reconcile_period,
            config: self.config,
            admitter: self.admitter,
            warnings: self.warnings,
            tracked: HashMap::new(),
            listed: false,
            ops: JoinSet::new(),
            running: HashMap::new(),
            gate: AdmissionGate::new(),
            gate_wanted: false,
            served: Served::default(),
            watch: watch_rx,
            watch_error: None,
            backoff,
            dirty: HashSet::new(),
            rows: BTreeMap::new(),
            generation: 0,
            snapshot: self.snapshot,
            changes: self.changes,
            events: self.events,
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        };
        owner.publish();
        owner.run().await;
        tasks.close();
        tasks.wait().await;
    }
}

/// One operation running for a pod.
struct Running {
    uid: String,
    next: Next,
    abort: AbortHandle,
    /// A release of a pod that holds devices: admissions wait for it, as
    /// the kubelet drops the devices of pods no longer active before it
    /// allocates.
    frees_devices: bool,
}

/// How an operation ended.
enum Outcome {
    Admitted(Result<Vec<ContainerResources>, AdmissionError>),
    Released(Result<(), ReleaseError>),
}

struct Owner {
    config: PodsConfig,
    admitter: Admitter,
    warnings: PodEvents,
    /// Pod UID → the pod.
    tracked: HashMap<String, Tracked>,
    /// Whether the pods were listed once: until then the reconcile gives
    /// nothing back (it cannot tell a pod gone from one not listed yet).
    listed: bool,
    ops: JoinSet<Outcome>,
    /// Each operation running.
    running: HashMap<Id, Running>,
    /// One pod's devices allocated at a time.
    gate: AdmissionGate,
    /// A due admission waits for the gate to open.
    gate_wanted: bool,
    /// What the plugins serve, to wake waiting pods when it grows.
    served: Served,
    watch: mpsc::UnboundedReceiver<PodWatchEvent>,
    /// The watch's last failure, logged once per change.
    watch_error: Option<String>,
    backoff: Backoff,
    next_reconcile: Instant,
    /// Pods whose row is to be made again.
    dirty: HashSet<String>,
    rows: BTreeMap<String, Arc<PodStatus>>,
    generation: u64,
    snapshot: watch::Sender<Arc<PodsSnapshot>>,
    changes: watch::Sender<u64>,
    events: broadcast::Sender<AgentEvent>,
    /// The watch, and Warnings being recorded.
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl Owner {
    async fn run(&mut self) {
        let shutdown = self.shutdown.clone();
        let mut devices = self.admitter.devices.changes();
        let mut drivers = self.admitter.dra.registered();
        self.served = Served::of(
            &self.admitter.devices.snapshot(),
            &drivers.borrow_and_update(),
        );
        devices.mark_unchanged();
        loop {
            self.start_due();
            if !self.dirty.is_empty() {
                self.publish();
            }
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(event) = self.watch.recv() => self.on_watch(event),
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
        let retry = self.tracked.values().filter_map(Tracked::retry_at).min();
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
        for (uid, tracked) in &self.tracked {
            match tracked.next(now) {
                Some(Next::Release) => releases.push(uid.clone()),
                Some(Next::Admit) => admissions.push((tracked.admission_order(), uid.clone())),
                None => {}
            }
        }
        for uid in releases {
            self.start_release(uid);
        }
        // Devices that go back are free before anyone is admitted.
        self.gate_wanted = false;
        if self.running.values().any(|r| r.frees_devices) {
            self.forget_gone();
            return;
        }
        // The oldest first; the others once it has its devices.
        admissions.sort();
        let mut admissions = admissions.into_iter().map(|(_, uid)| uid);
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

    /// Admits pod `uid`, its devices allocated with `pass` held.
    fn start_admission(&mut self, uid: String, pass: super::admission_gate::GatePass) {
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        let Some(pod) = tracked.pod().cloned() else {
            return;
        };
        let pod_ref = tracked.pod_ref().clone();
        let admitter = self.admitter.clone();
        let abort = self
            .ops
            .spawn(async move { Outcome::Admitted(admitter.admit(&pod, &pod_ref, pass).await) });
        tracked.started(Next::Admit);
        self.running_op(abort, uid, Next::Admit, false);
    }

    /// Gives back what pod `uid` holds.
    fn start_release(&mut self, uid: String) {
        let Some(tracked) = self.tracked.get_mut(&uid) else {
            return;
        };
        let pod_ref = tracked.pod_ref().clone();
        let frees_devices = !self
            .admitter
            .devices
            .snapshot()
            .allocations_of(&pod_ref.uid)
            .is_empty();
        let (devices, dra) = (self.admitter.devices.clone(), self.admitter.dra.clone());
        let abort = self
            .ops
            .spawn(async move { Outcome::Released(release(&devices, &dra, &pod_ref.uid).await) });
        tracked.started(Next::Release);
        self.running_op(abort, uid, Next::Release, frees_devices);
    }

    fn running_op(&mut self, abort: AbortHandle, uid: String, next: Next, frees_devices: bool) {
        let running = Running {
            uid: uid.clone(),
            next,
            abort,
            frees_devices,
        };
        self.running.insert(running.abort.id(), running);
        self.dirty.insert(uid);
    }

    /// Cuts short the admission of pod `uid` when it is no longer to be
    /// admitted (deleted, ended): it gives back what it got instead.
    fn cancel_unwanted(&mut self, uid: &str) {
        let Some(tracked) = self.tracked.get(uid) else {
            return;
        };
        if tracked.wants_admission() || !tracked.admitting() {
            return;
        }
        for running in self.running.values() {
            if running.uid == uid && running.next == Next::Admit {
                tracing::info!(pod = %tracked.pod_ref(), %uid, "the pod is no longer to be admitted; its admission is cut short");
                running.abort.abort();
            }
        }
    }

    /// What the plugins serve changed: when it grew, pods that wait or
    /// failed are tried again now.
    fn on_served(&mut self, drivers: &crate::dra::Routes) {
        let now = Served::of(&self.admitter.devices.snapshot(), drivers);
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
            PodWatchEvent::Listed(pods) => {
                let mut listed = HashSet::new();
                for pod in pods {
                    if let Some(uid) = self.upsert(pod) {
                        listed.insert(uid);
                    }
                }
                let mut went = Vec::new();
                for (uid, tracked) in &mut self.tracked {
                    if !listed.contains(uid) && tracked.in_api() {
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
                self.watch_error = None;
                self.reconcile();
                self.next_reconcile = Instant::now() + self.config.reconcile_period;
                // Listed shows even when no pod changed.
                self.publish();
            }
            PodWatchEvent::Applied(pod) => {
                if let Some(uid) = self.upsert(pod) {
                    self.cancel_unwanted(&uid);
                }
            }
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
                if self.watch_error.as_ref() != Some(&text) {
                    tracing::warn!(error = %text, "watching the node's pods failed; watching again with backoff");
                    self.watch_error = Some(text);
                }
            }
        }
    }

    /// Follows `pod` as the API shows it now; returns its UID. A mirror
    /// pod is not followed.
    fn upsert(&mut self, pod: Arc<k8s_openapi::api::core::v1::Pod>) -> Option<String> {
        let pod_ref = pod_ref(&pod)?;
        if is_mirror(&pod) {
            tracing::debug!(pod = %pod_ref, "a mirror pod: its static pod is not run here");
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

    /// Gives back what the managers hold for pods that are not active:
    /// every pod UID their records name that the API does not have (gone
    /// while the agent was away, made again under the same name) or no
    /// longer runs.
    fn reconcile(&mut self) {
        if !self.listed {
            return;
        }
        let devices = self.admitter.devices.snapshot();
        let claims = self.admitter.dra.claims().borrow().clone();
        for (uid, pod_ref) in held_pods(&devices, &claims) {
            match self.tracked.get_mut(&uid) {
                Some(tracked) => {
                    if !tracked.wants_admission() && !tracked.running() {
                        tracked.holds_again();
                        self.dirty.insert(uid);
                    }
                }
                None => {
                    tracing::info!(pod = %pod_ref, %uid, "a pod the API no longer has holds devices or claims; giving them back");
                    let tracked = Tracked::orphan(pod_ref, SystemTime::now());
                    self.tracked.insert(uid.clone(), tracked);
                    self.dirty.insert(uid);
                }
            }
        }
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
        match outcome {
            Outcome::Admitted(Ok(containers)) => {
                tracing::info!(pod = %pod, uid = %pod.uid, containers = containers.len(), "pod admitted");
                tracked.admitted(containers, now.1);
                self.emit(EventKind::Admitted, &pod, None);
            }
            Outcome::Admitted(Err(e)) => {
                let warning = tracked.not_admitted(&e, |n| backoff.delay(n), now);
                if e.is_wait() {
                    tracing::debug!(pod = %pod, error = %e, "pod waits");
                    self.emit(EventKind::Waiting, &pod, Some(e.to_string()));
                } else {
                    self.emit(EventKind::AdmissionFailed, &pod, Some(e.message()));
                }
                if let Some(warning) = warning {
                    tracing::warn!(pod = %pod, reason = %warning.reason, message = %warning.message, "pod not admitted; trying again with backoff");
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
                tracing::info!(pod = %pod, uid = %pod.uid, "what the pod held was given back");
                tracked.released();
                self.emit(EventKind::PodReleased, &pod, None);
                for (other, tracked) in &mut self.tracked {
                    if *other != uid && tracked.room_made() {
                        self.dirty.insert(other.clone());
                    }
                }
            }
            Outcome::Released(Err(e)) => {
                tracing::warn!(pod = %pod, uid = %pod.uid, error = %e, "what the pod held was not all given back; trying again with backoff");
                tracked.not_released(&e, |n| backoff.delay(n), now);
                self.emit(EventKind::ReleaseFailed, &pod, Some(e.to_string()));
            }
        }
    }

    /// An operation was cut short (a pod no longer to be admitted), or
    /// panicked (a bug: the pod is tried again with backoff, as what it
    /// was doing).
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
        if error.is_cancelled() {
            tracked.admission_cancelled();
            return;
        }
        tracing::error!(%uid, error = %error, "a pod's operation failed unexpectedly");
        match next {
            Next::Admit => {
                let message = format!("admission failed unexpectedly: {error}");
                tracked.admission_panicked(message, |n| backoff.delay(n), now);
            }
            Next::Release => {
                tracked.not_released(&ReleaseError::Panicked, |n| backoff.delay(n), now);
            }
        }
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
    fn publish(&mut self) {
        for uid in std::mem::take(&mut self.dirty) {
            match self.tracked.get(&uid) {
                Some(tracked) => {
                    self.rows.insert(uid, Arc::new(tracked.status()));
                }
                None => {
                    self.rows.remove(&uid);
                }
            }
        }
        self.generation += 1;
        self.snapshot.send_replace(Arc::new(PodsSnapshot {
            running: true,
            serving: true,
            listed: self.listed,
            generation: self.generation,
            pods: self.rows.clone(),
        }));
        self.changes.send_modify(|c| *c += 1);
    }
}

//! One pod as the pods owner follows it, and every decision about it: what
//! to do next (admit, give back, nothing), and what each outcome changes.
//! Pure state: the owner's task runs what it says and reports back, so the
//! transitions are tested without sockets or an API server.
//!
//! A pod wants to be admitted while the API has it and it is active (not
//! `Succeeded` or `Failed`, not being deleted); otherwise it wants what it
//! holds given back. One operation runs per pod at a time; a failed one is
//! tried again with backoff, or at once when the pod changes (a waiting
//! pod's claims get allocated and reserved through such changes).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
use nodeplugins_api::retry::Retry;
use tokio::time::Instant;

use crate::common::unix_time::unix_ms;
use crate::pods::admit::admission::AdmissionError;
use crate::pods::admit::container::ContainerResources;
use crate::pods::admit::spec::is_active;
use crate::pods::pod::PodRef;
use crate::pods::run::pod_sync::ApiPhase;
use crate::pods::snapshot::{PodPhase, PodStatus};
use crate::pods::teardown::release::ReleaseError;

/// What to do next with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Allocate its devices and prepare its claims.
    Admit,
    /// Run its containers (its worker).
    Run,
    /// Stop what it runs and give back what it holds.
    Release,
}

/// A Warning the pod is to get, as the kubelet would record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// One pod bound to the node, or known only from what it holds.
#[derive(Debug)]
pub(crate) struct Tracked {
    /// The pod as the API last showed it; `None` for a pod known only from
    /// what it holds (it went while the agent was away, or was made again
    /// under the same name with a new UID).
    pod: Option<Arc<Pod>>,
    pod_ref: PodRef,
    /// Whether the API still has it.
    in_api: bool,
    phase: PodPhase,
    /// An operation for it runs.
    running: bool,
    /// Failed attempts in a row, and when the next is due after one (why
    /// is `problem`).
    retry: Retry<Infallible>,
    /// Why it waits or failed: (reason, message).
    problem: Option<(Option<String>, String)>,
    /// The last Warning the pod got, so a repeated failure is not recorded
    /// again.
    warned: Option<Warning>,
    seen_at: SystemTime,
    ready_at: Option<SystemTime>,
    containers: Vec<ContainerResources>,
    /// Its worker found it ended (`Succeeded`, `Failed`): it is no longer
    /// active, whatever the API shows yet.
    ended: Option<ApiPhase>,
    /// The phase its worker last wrote.
    api_phase: Option<ApiPhase>,
    /// It was admitted with what it held already, no plugin called.
    restored: bool,
    /// Room was made (a plugin serves more, a pod gave back) while its
    /// attempt ran: if the attempt fails, the next is at once (what it
    /// read may be older than the room).
    room_made_while_running: bool,
    /// Its next admission sets up again what it holds (the runtime lost
    /// its containers).
    fresh: bool,
    /// The node stops it for good (its shutdown): never admitted or run
    /// again, whatever the API shows.
    killed: bool,
}

impl Tracked {
    /// A pod the API shows bound to the node.
    pub(crate) fn seen(pod: Arc<Pod>, pod_ref: PodRef, now: SystemTime) -> Self {
        let mut tracked = Self::orphan(pod_ref, now);
        tracked.pod = Some(pod);
        tracked.in_api = true;
        tracked
    }

    /// A pod the API does not have, known only from what it holds.
    pub(crate) fn orphan(pod_ref: PodRef, now: SystemTime) -> Self {
        Self {
            pod: None,
            pod_ref,
            in_api: false,
            phase: PodPhase::Pending,
            running: false,
            retry: Retry::default(),
            problem: None,
            warned: None,
            seen_at: now,
            ready_at: None,
            containers: Vec::new(),
            ended: None,
            api_phase: None,
            restored: false,
            fresh: false,
            room_made_while_running: false,
            killed: false,
        }
    }

    /// The pod.
    pub(crate) fn pod_ref(&self) -> &PodRef {
        &self.pod_ref
    }

    /// The pod as the API last showed it.
    pub(crate) fn pod(&self) -> Option<&Arc<Pod>> {
        self.pod.as_ref()
    }

    /// Where it is.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> PodPhase {
        self.phase
    }

    /// Whether an operation for it runs.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// Where it comes in the kubelet's admission order: oldest
    /// `creationTimestamp` first, then by namespace and name (the kubelet
    /// leaves pods of the same second in no fixed order).
    pub(crate) fn admission_order(&self) -> (i128, String, String) {
        let created = self
            .pod
            .as_ref()
            .and_then(|p| p.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.as_nanosecond())
            // A pod without a time (none in practice) comes after the others.
            .unwrap_or(i128::MAX);
        (
            created,
            self.pod_ref.namespace.clone(),
            self.pod_ref.name.clone(),
        )
    }

    /// When its next attempt is due, if it waits for one.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry.due_at().filter(|_| !self.running)
    }

    /// Whether the API has it.
    pub(crate) fn in_api(&self) -> bool {
        self.in_api
    }

    /// Whether it is to be admitted and run: the API has it and it is
    /// active, and it did not end here.
    pub(crate) fn wants_admission(&self) -> bool {
        self.in_api
            && self.ended.is_none()
            && !self.killed
            && self.pod.as_deref().is_some_and(is_active)
    }

    /// Whether it is admitted or being admitted, and not ended: what the
    /// kubelet counts among its active pods.
    pub(crate) fn active(&self) -> bool {
        self.wants_admission() && matches!(self.phase, PodPhase::Admitting | PodPhase::Admitted)
    }

    /// Whether everything it held was given back and nothing runs for it.
    pub(crate) fn given_back(&self) -> bool {
        !self.running && self.phase == PodPhase::Released
    }

    /// The node stops it for good.
    pub(crate) fn kill(&mut self) {
        self.killed = true;
        self.retry.wake();
    }

    /// It was refused for good (`written`: its status says so); if the
    /// status could not be written, the refusal is tried again after the
    /// backoff.
    pub(crate) fn rejected(
        &mut self,
        written: bool,
        delay: impl FnOnce(u32) -> std::time::Duration,
        now: (Instant, SystemTime),
    ) {
        if written {
            self.finished();
            self.ended = Some(ApiPhase::Failed);
            self.api_phase = Some(ApiPhase::Failed);
        } else {
            self.failed_attempt(delay, now);
        }
    }

    /// Whether its next step is an admission (it wants one and is not
    /// admitted).
    pub(crate) fn waits_for_admission(&self) -> bool {
        self.wants_admission() && self.phase != PodPhase::Admitted
    }

    /// The containers that got resources.
    pub(crate) fn containers(&self) -> &[ContainerResources] {
        &self.containers
    }

    /// Whether it may be forgotten: gone from the API, holding nothing.
    pub(crate) fn forgettable(&self) -> bool {
        !self.in_api && !self.running && self.phase == PodPhase::Released
    }

    /// What to do with it now, if anything.
    pub(crate) fn next(&self, now: Instant) -> Option<Next> {
        if self.running || self.retry.waiting(now) {
            return None;
        }
        if self.wants_admission() {
            Some(if self.phase == PodPhase::Admitted {
                Next::Run
            } else {
                Next::Admit
            })
        } else {
            (self.phase != PodPhase::Released).then_some(Next::Release)
        }
    }

    /// The API shows the pod changed: a pod that waits or failed is tried
    /// again at once.
    pub(crate) fn update(&mut self, pod: Arc<Pod>) {
        self.pod = Some(pod);
        self.in_api = true;
        if matches!(self.phase, PodPhase::Waiting | PodPhase::Failed) {
            self.retry.wake();
        }
    }

    /// The API no longer has the pod (`last`: as it was deleted, if
    /// known).
    pub(crate) fn gone(&mut self, last: Option<Arc<Pod>>) {
        if let Some(last) = last {
            self.pod = Some(last);
        }
        self.in_api = false;
        self.retry.wake();
    }

    /// It holds something again although it was given back (records made
    /// behind the owner's back): give it back again.
    pub(crate) fn holds_again(&mut self) {
        if self.phase == PodPhase::Released {
            self.phase = PodPhase::Releasing;
        }
    }

    /// Something was given back, or a plugin serves more: a pod that waits
    /// or failed may now fit, and one whose release failed may now reach
    /// its driver, so it is tried again at once. Says whether it will be.
    pub(crate) fn room_made(&mut self) -> bool {
        if self.running && matches!(self.phase, PodPhase::Admitting | PodPhase::Releasing) {
            self.room_made_while_running = true;
            return false;
        }
        let woken = matches!(
            self.phase,
            PodPhase::Waiting | PodPhase::Failed | PodPhase::Releasing
        ) && !self.running
            && self.retry.due().is_some();
        if woken {
            self.retry.wake();
        }
        woken
    }

    /// `next` started.
    pub(crate) fn started(&mut self, next: Next) {
        self.running = true;
        self.phase = match next {
            Next::Admit => PodPhase::Admitting,
            Next::Run => PodPhase::Admitted,
            Next::Release => PodPhase::Releasing,
        };
    }

    /// Its worker wrote `phase`.
    pub(crate) fn phase_written(&mut self, phase: ApiPhase) {
        self.api_phase = Some(phase);
    }

    /// Its worker returned: the pod ended (`Some`), or it was told to stop.
    pub(crate) fn worker_ended(&mut self, ended: Option<ApiPhase>) {
        self.finished();
        if let Some(phase) = ended {
            self.ended = Some(phase);
            self.api_phase = Some(phase);
        }
    }

    /// Its worker failed unexpectedly (a bug): started again after the
    /// backoff.
    pub(crate) fn worker_panicked(
        &mut self,
        message: String,
        delay: impl FnOnce(u32) -> std::time::Duration,
        now: (Instant, SystemTime),
    ) {
        self.failed_attempt(delay, now);
        self.problem = Some((None, message));
    }

    /// Whether it was admitted with what it held already.
    pub(crate) fn restored(&self) -> bool {
        self.restored
    }

    /// Whether its next admission sets up again what it holds.
    pub(crate) fn fresh(&self) -> bool {
        self.fresh
    }

    /// The runtime lost its sandbox while the agent was away (a reboot, a
    /// runtime wiped): admitted again, setting up again what it holds, then
    /// run again.
    pub(crate) fn runtime_lost(&mut self) {
        self.finished();
        self.phase = PodPhase::Pending;
        self.fresh = true;
        self.restored = false;
        self.containers.clear();
    }

    /// Admitted, with what each container got (`restored`: all of it held
    /// already).
    pub(crate) fn admitted(
        &mut self,
        containers: Vec<ContainerResources>,
        restored: bool,
        now: SystemTime,
    ) {
        self.finished();
        self.restored = restored;
        self.fresh = false;
        self.phase = PodPhase::Admitted;
        self.containers = containers;
        self.ready_at = Some(now);
    }

    /// Not admitted: it waits, or failed; tried again after `delay` of the
    /// backoff (`delay(failures)`). Returns the Warning to record on the
    /// pod, when it is a new one: the kubelet records one on every sync of
    /// a pod it cannot prepare or admit, waiting ones included (its
    /// recorder folds the repeats; here a repeat is not sent at all).
    pub(crate) fn not_admitted(
        &mut self,
        error: &AdmissionError,
        delay: impl FnOnce(u32) -> std::time::Duration,
        now: (Instant, SystemTime),
    ) -> Option<Warning> {
        self.failed_attempt(delay, now);
        let warning = Warning {
            reason: error.reason(),
            message: error.message(),
        };
        if error.is_wait() {
            self.phase = PodPhase::Waiting;
            self.problem = Some((None, error.to_string()));
        } else {
            self.phase = PodPhase::Failed;
            self.problem = Some((Some(warning.reason.clone()), warning.message.clone()));
        }
        if self.warned.as_ref() == Some(&warning) {
            return None;
        }
        self.warned = Some(warning.clone());
        Some(warning)
    }

    /// Its admission panicked (a bug): it failed, and is tried again after
    /// the backoff like any failed admission.
    pub(crate) fn admission_panicked(
        &mut self,
        message: String,
        delay: impl FnOnce(u32) -> std::time::Duration,
        now: (Instant, SystemTime),
    ) {
        self.failed_attempt(delay, now);
        self.phase = PodPhase::Failed;
        self.problem = Some((None, message));
    }

    /// Its admission was cut short because the pod is no longer to be
    /// admitted (deleted, or ended): what it got so far is to be given
    /// back at once.
    pub(crate) fn admission_cancelled(&mut self) {
        self.finished();
        self.phase = PodPhase::Releasing;
    }

    /// Everything it held was given back.
    pub(crate) fn released(&mut self) {
        self.finished();
        self.phase = PodPhase::Released;
        self.containers.clear();
        self.ready_at = None;
    }

    /// Not all of it was given back; tried again after the backoff.
    pub(crate) fn not_released(
        &mut self,
        error: &ReleaseError,
        delay: impl FnOnce(u32) -> std::time::Duration,
        now: (Instant, SystemTime),
    ) {
        self.failed_attempt(delay, now);
        self.phase = PodPhase::Releasing;
        self.problem = Some((None, error.to_string()));
    }

    /// An attempt failed: the next is due after `delay(failures)`.
    fn failed_attempt(
        &mut self,
        delay: impl FnOnce(u32) -> std::time::Duration,
        now: (Instant, SystemTime),
    ) {
        self.running = false;
        let failures = self.retry.count_failure();
        if std::mem::take(&mut self.room_made_while_running) {
            self.retry.wake();
            return;
        }
        self.retry.schedule_at(now, delay(failures));
    }

    fn finished(&mut self) {
        self.running = false;
        self.room_made_while_running = false;
        self.retry.succeeded();
        self.problem = None;
    }

    /// Its row in the snapshot.
    pub(crate) fn status(&self) -> PodStatus {
        let unix_us = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        };
        PodStatus {
            pod: self.pod_ref.clone(),
            phase: self.phase,
            reason: self.problem.as_ref().and_then(|(reason, _)| reason.clone()),
            message: self.problem.as_ref().map(|(_, message)| message.clone()),
            failures: self.retry.failures(),
            retry_at_unix_ms: self.retry.due().map(|d| unix_ms(d.wall)),
            seen_at_unix_us: unix_us(self.seen_at),
            ready_at_unix_us: self.ready_at.map(unix_us),
            in_api: self.in_api,
            pod_phase: self.api_phase.map(|p| p.as_str().to_string()),
            containers: self.containers.clone(),
            volumes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;

//! One admitted pod's worker: runs its containers through the runtime
//! until the pod ends or is to stop, as the kubelet's pod worker syncs a
//! pod. Each round it observes the runtime (the pod's latest sandbox and
//! its containers), asks [`plan`] what is next, does it (a sandbox; for
//! each container to start: its image as the pull policy says, its device
//! plugins' PreStartContainer, then create and start), and writes the
//! pod's status when it changed. It waits for a lifecycle event of its pod,
//! a change of the pod, a back-off falling due, a change of the health of
//! what its containers hold, or its stop.
//!
//! Containers that run when it starts (the agent restarted) are adopted as
//! they are: nothing is started again and no plugin is called. A container
//! that cannot be started (its image, PreStartContainer, the runtime
//! refusing) waits with the kubelet's reason and is tried again after 10 to 15 s
//! (the kubelet's pod worker back-off) or on the next change; its devices
//! stay allocated. When the pod ends (`Succeeded`, `Failed`) the worker
//! writes that and returns; stopping its containers, its sandbox and giving
//! back what it held is the release's.

mod kill;
mod probes;
mod pull;
mod start;
mod status;
mod volumes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::device::DeviceHandle;
use crate::dra::DraHandle;
use crate::pods::admit::container::{ContainerKind, ContainerResources};
use crate::pods::admit::spec::{containers, is_active};
use crate::pods::informers::Informers;
use crate::pods::kube_events::{FAILED_CREATE_POD_SANDBOX, PodEvents};
use crate::pods::lifecycle::report::Report;
use crate::pods::pod::PodRef;
use crate::pods::run::crash_backoff::{CrashBackoff, backoff_key};
use crate::pods::run::hooks::POST_START_HOOK_ERROR;
use crate::pods::run::image_pulls::ImagePulls;
use crate::pods::run::lifecycle_events::LifecycleEvent;
use crate::pods::run::pod_sync::{
    ApiPhase, CRASH_LOOP_BACK_OFF, KillCause, Observed, Replaced, StartErrors, SyncPlan, plan,
};
use crate::pods::run::probes::{PodProber, ProberMetrics};
use crate::pods::run::resource_health::{HealthSources, allocated_resources_status};
use crate::pods::run_options::host_dns::host_dns;
use crate::pods::run_options::pod_dns::{PodDns, PodDnsConfig, pod_dns};
use crate::pods::run_options::runtime_spec::sandbox_spec;
use crate::pods::static_pods::mirror::Mirrors;
use crate::pods::status::status_writer::StatusWriter;
use crate::runtime::{ContainerRuntime, ContainerState, DnsSpec, RuntimeError, SandboxSpec};
use crate::volumes::{PodVolumes, VolumeError, VolumeHandle};

/// A failed sandbox or container start is tried again this long after, or
/// sooner on a change: the kubelet's pod worker back-off
/// (`backOffPeriod`, jittered by up to half of it, as `wait.Jitter` with
/// `workerBackOffPeriodJitterFactor`).
const SYNC_BACKOFF: Backoff =
    Backoff::new(Duration::from_secs(10), Duration::from_secs(10)).with_jitter(0.5);
/// A runtime that cannot be read or a status not written yet is tried
/// again this long after (the kubelet's `backOffOnTransientErrorPeriod`,
/// jittered likewise).
const TRANSIENT_BACKOFF: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).with_jitter(0.5);

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerEnd {
    /// The pod ended: nothing restarts any more.
    Ended(ApiPhase),
    /// It was told to stop (the pod is deleted, gone or ended in the API).
    Stopped,
    /// The pod ran here before, yet the runtime has no ready sandbox of it
    /// (the node rebooted, or the runtime's state was wiped): what it holds
    /// is to be set up again before its containers are made again.
    RuntimeLost,
}

/// Everything a worker uses, shared by all workers.
#[derive(Clone)]
pub(crate) struct WorkerContext {
    pub(crate) runtime: Arc<dyn ContainerRuntime>,
    /// The runtime's name and the node's address, learnt once.
    pub(crate) node: Arc<NodeFacts>,
    pub(crate) devices: DeviceHandle,
    /// The DRA manager: the claims prepared and their devices' health.
    pub(crate) dra: DraHandle,
    pub(crate) writer: StatusWriter,
    pub(crate) events: broadcast::Sender<LifecycleEvent>,
    pub(crate) reports: mpsc::UnboundedSender<Report>,
    /// Where pods' logs go, when the runtime writes them.
    pub(crate) pod_logs: Option<PathBuf>,
    /// Where the pods' files are made, with a real runtime.
    pub(crate) pods_dir: Option<PathBuf>,
    /// The node's Node and the cluster's Services.
    pub(crate) informers: Informers,
    /// The volume manager, with a real runtime.
    pub(crate) volumes: Option<VolumeHandle>,
    /// Events on pods (a volume that cannot be set up).
    pub(crate) pod_events: PodEvents,
    /// The resolver settings pods get, with a real runtime.
    pub(crate) dns: Arc<PodDnsConfig>,
    /// The node's mirror pods, to which static pods' statuses are written.
    pub(crate) mirrors: Mirrors,
    /// How often a pod's volumes are written again from their objects and
    /// tokens (the kubelet's pod resync, `syncFrequency`, jittered by up
    /// to half).
    pub(crate) resync: Backoff,
    /// When the pods started running here (the agent started): a probe
    /// made within a period of it waits a random part of its period
    /// first, and a container that ran before it keeps its status.
    pub(crate) started: (SystemTime, tokio::time::Instant),
    /// The node's probes' metrics.
    pub(crate) prober_metrics: ProberMetrics,
    /// The hooks' metrics.
    pub(crate) lifecycle_metrics: crate::pods::run::lifecycle_metrics::LifecycleMetrics,
}

/// What the status of every pod names, learnt when first needed (not at
/// start, which must not wait on a runtime or an API server away): the
/// runtime's name, the scheme of container ids (`containerd://`), whether
/// it makes mounts read-only all the way down, and the node's address.
pub(crate) struct NodeFacts {
    runtime_name: tokio::sync::OnceCell<String>,
    recursive_read_only: tokio::sync::OnceCell<bool>,
    node_ip: tokio::sync::OnceCell<Option<String>>,
    configured_ip: Option<String>,
    informers: Informers,
}

impl NodeFacts {
    /// The address `configured_ip`, else the Node's, as `informers` have
    /// it.
    pub(crate) fn new(configured_ip: Option<String>, informers: Informers) -> Self {
        Self {
            runtime_name: tokio::sync::OnceCell::new(),
            recursive_read_only: tokio::sync::OnceCell::new(),
            node_ip: tokio::sync::OnceCell::new(),
            configured_ip,
            informers,
        }
    }

    /// The runtime's name, once it answered.
    async fn runtime_name(&self, runtime: &dyn ContainerRuntime) -> Result<String, RuntimeError> {
        self.runtime_name
            .get_or_try_init(|| async {
                let version = runtime.version().await?;
                tracing::info!(runtime = %version.name, version = %version.version, api = %version.api_version, "container runtime");
                Ok(version.name)
            })
            .await
            .cloned()
    }

    /// Whether the runtime's default handler makes read-only mounts
    /// read-only all the way down, once it answered (no, until then).
    pub(crate) async fn recursive_read_only(&self, runtime: &dyn ContainerRuntime) -> bool {
        self.recursive_read_only
            .get_or_try_init(|| async {
                let supported = runtime.supports_recursive_read_only().await?;
                tracing::info!(supported, "the runtime's recursive read-only mounts");
                Ok::<bool, RuntimeError>(supported)
            })
            .await
            .copied()
            .unwrap_or(false)
    }

    /// The node's address, once read (none when the Node has none).
    pub(crate) async fn node_ip(&self) -> Option<String> {
        if let Some(ip) = &self.configured_ip {
            return Some(ip.clone());
        }
        self.node_ip
            .get_or_try_init(|| async { self.informers.node_ip().await })
            .await
            .ok()
            .cloned()
            .flatten()
    }
}

/// One pod's worker.
pub(crate) struct Worker {
    context: WorkerContext,
    pod_ref: PodRef,
    pod: watch::Receiver<Arc<Pod>>,
    resources: BTreeMap<String, ContainerResources>,
    stop: CancellationToken,
    backoff: CrashBackoff,
    start_errors: StartErrors,
    /// The containers killed because their spec changed, made again at
    /// the next start of containers.
    replaced: Replaced,
    /// The pull back-off of the pod's images.
    image_pulls: ImagePulls,
    /// The attempt of each container whose crash-loop back-off was told
    /// in an Event.
    backoff_told: BTreeMap<String, u32>,
    /// Each condition as last written.
    conditions: BTreeMap<String, (bool, SystemTime)>,
    start_time: SystemTime,
    written: Option<Value>,
    /// The pod's version the last write went against, and the one it
    /// made: a pod still seen at the first is at the second.
    own_write: Option<(String, String)>,
    /// The last status write found the pod gone from the API.
    pod_gone: bool,
    /// The UID of the pod `written` went to (a static pod's mirror pod
    /// changes UID when it is made again); `None` for a static pod's
    /// status kept until its mirror is made.
    written_to: Option<String>,
    phase: Option<ApiPhase>,
    /// The runtime's last failure, logged once until it answers again.
    runtime_reads: Retry<RuntimeError>,
    /// The Services' variables, read at the first start.
    service_env: Option<Vec<(String, String)>>,
    /// Its pod was admitted with what it held (the agent restarted): the
    /// first look tells whether its containers are still there.
    adopting: bool,
    /// The health of what its containers hold, as last worked out.
    resource_health: BTreeMap<String, Value>,
    /// Its volumes, once set up (none without a volume manager).
    volumes: Option<PodVolumes>,
    /// Setting up its volumes: failures in a row, the next try, the last
    /// error (said once as a `FailedMount` Event).
    volume_setup: Retry<VolumeError>,
    /// When its volumes first failed to be set up, while they fail (the
    /// kubelet's `Unable to attach or mount volumes` after 2m3s).
    /// and whether that was said.
    volumes_failing_since: Option<(tokio::time::Instant, bool)>,
    /// When its volumes' content is written again (the pod resync).
    volumes_resync_at: Option<tokio::time::Instant>,
    /// The pod as last seen, to tell an update from a status write.
    last_seen: Arc<Pod>,
    /// The node stopped the pod for good: (reason, message) its status
    /// shows.
    disruption: Option<(&'static str, &'static str)>,
    /// Its containers' probes, once its worker first looked (none when
    /// it has none).
    prober: Option<Option<PodProber>>,
}

impl Worker {
    /// The worker of `pod_ref`, whose containers got `resources`.
    pub(crate) fn new(
        context: WorkerContext,
        pod_ref: PodRef,
        pod: watch::Receiver<Arc<Pod>>,
        resources: &[ContainerResources],
        stop: CancellationToken,
        adopting: bool,
    ) -> Self {
        let (start_time, conditions) = {
            let pod = pod.borrow();
            let status = pod.status.as_ref();
            let start = status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| SystemTime::from(t.0))
                .unwrap_or_else(SystemTime::now);
            let conditions = status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let at = SystemTime::from(c.last_transition_time.as_ref()?.0);
                    Some((c.type_.clone(), (c.status == "True", at)))
                })
                .collect();
            (start, conditions)
        };
        let last_seen = pod.borrow().clone();
        Self {
            context,
            pod_ref,
            resources: resources
                .iter()
                .map(|r| (r.name.clone(), r.clone()))
                .collect(),
            stop,
            backoff: CrashBackoff::default(),
            start_errors: StartErrors::new(),
            replaced: Replaced::new(),
            image_pulls: ImagePulls::default(),
            backoff_told: BTreeMap::new(),
            conditions,
            start_time,
            written: None,
            own_write: None,
            pod_gone: false,
            written_to: None,
            phase: None,
            runtime_reads: Retry::default(),
            service_env: None,
            adopting,
            resource_health: BTreeMap::new(),
            volumes: None,
            volume_setup: Retry::default(),
            volumes_failing_since: None,
            volumes_resync_at: None,
            last_seen,
            pod,
            disruption: None,
            prober: None,
        }
    }

    /// Runs the pod until it ends or the worker is told to stop.
    pub(crate) async fn run(&mut self) -> WorkerEnd {
        let mut events = self.context.events.subscribe();
        if self.adopting && self.runtime_lost().await {
            return WorkerEnd::RuntimeLost;
        }
        // The health of what the pod holds is followed only when it holds
        // something: a device manager or DRA manager change costs the
        // other pods nothing.
        let holds = self
            .resources
            .values()
            .any(|r| !r.devices.is_empty() || !r.claim_cdi_devices.is_empty())
            || self
                .pod
                .borrow()
                .spec
                .as_ref()
                .is_some_and(|s| s.resource_claims.as_ref().is_some_and(|c| !c.is_empty()));
        let mut device_changes = self.context.devices.changes();
        let mut dra_changes = self.context.dra.changes();
        let (mut devices_open, mut dra_open) = (holds, holds);
        let mut wake = None;
        let mut resync = true;
        loop {
            if self.stop.is_cancelled() {
                return WorkerEnd::Stopped;
            }
            if resync {
                wake = match self.sync().await {
                    Ok((phase, wake)) => {
                        if self.runtime_reads.succeeded() == Said::Recovered {
                            tracing::info!("the runtime answers again");
                        }
                        if let Some(phase) = phase
                            && phase.is_terminal()
                            && self.written.is_some()
                        {
                            return WorkerEnd::Ended(phase);
                        }
                        wake
                    }
                    Err(e) => {
                        let now = tokio::time::Instant::now();
                        if self.runtime_reads.failed(e, &TRANSIENT_BACKOFF, now) == Said::NewError
                            && let Some(e) = self.runtime_reads.last_error()
                        {
                            tracing::warn!(error = %e, "cannot read the pod's containers from the runtime; trying again");
                        }
                        self.runtime_reads.due_at()
                    }
                };
            }
            resync = true;
            let status_retry = self
                .written
                .is_none()
                .then(|| tokio::time::Instant::now() + TRANSIENT_BACKOFF.delay(1));
            let next = [wake, status_retry].into_iter().flatten().min();
            let uid = self.pod_ref.uid.clone();
            tokio::select! {
                () = self.stop.cancelled() => return WorkerEnd::Stopped,
                changed = self.pod.changed() => {
                    if changed.is_err() {
                        return WorkerEnd::Stopped;
                    }
                    // Its status alone changing (this worker's own write,
                    // most often) asks for nothing, as with the kubelet.
                    resync = self.pod_updated();
                }
                () = next_event(&mut events, &uid) => {}
                () = nodeplugins_api::timer::sleep_until(next) => {}
                changed = device_changes.changed(), if devices_open => {
                    devices_open = changed.is_ok();
                    resync = self.health_changed();
                }
                changed = dra_changes.changed(), if dra_open => {
                    dra_open = changed.is_ok();
                    resync = self.health_changed();
                }
                () = probe_results(self.prober.as_ref()) => {}
            }
        }
    }

    /// The health of what the pod's containers hold, worked out now.
    fn current_resource_health(&self, pod: &Pod) -> BTreeMap<String, Value> {
        let now = tokio::time::Instant::now();
        let devices = self.context.devices.snapshot().status_at(now);
        let drivers = self.context.dra.snapshot().status_at(now);
        let claims = self.context.dra.prepared_claims();
        let sources = HealthSources {
            devices: &devices,
            claims: &claims,
            drivers: &drivers,
        };
        allocated_resources_status(pod, &self.resources, &sources)
    }

    /// Whether the health of what the pod holds is not what was last
    /// written (a round then writes it).
    fn health_changed(&self) -> bool {
        let pod = self.pod.borrow().clone();
        self.current_resource_health(&pod) != self.resource_health
    }

    /// Whether the pod ran here before (its status names a container) yet
    /// the runtime has no ready sandbox of it. A runtime that does not
    /// answer has lost nothing yet.
    async fn runtime_lost(&self) -> bool {
        let pod = self.pod.borrow().clone();
        let ran = pod.status.as_ref().is_some_and(|s| {
            s.container_statuses
                .iter()
                .chain(s.init_container_statuses.iter())
                .flatten()
                .any(|c| c.container_id.as_deref().is_some_and(|id| !id.is_empty()))
        });
        if !ran {
            return false;
        }
        match observed_sandbox(self.context.runtime.as_ref(), &self.pod_ref.uid).await {
            Ok(found) => found.is_none(),
            Err(_) => false,
        }
    }

    /// One round: observe, decide, act, write the status. Returns the
    /// phase written and when to look again at the latest.
    async fn sync(
        &mut self,
    ) -> Result<(Option<ApiPhase>, Option<tokio::time::Instant>), RuntimeError> {
        let pod = self.pod.borrow_and_update().clone();
        if !is_active(&pod) {
            // Ended or deleted in the API: never written back to running.
            return Ok((None, None));
        }
        let mut observed = observe(self.context.runtime.as_ref(), &self.pod_ref.uid).await?;
        let now = SystemTime::now();
        self.start_probes(&pod).await;
        let mut decided = self.plan(&pod, &observed, now);
        if !decided.kill.is_empty() {
            for kill in decided.kill.clone() {
                if kill.cause == KillCause::DefinitionChanged {
                    self.replaced.insert(kill.id.clone());
                }
                self.kill_running(&pod, &kill).await;
            }
            observed = observe(self.context.runtime.as_ref(), &self.pod_ref.uid).await?;
            decided = self.plan(&pod, &observed, now);
        }
        if self.written.is_none() && (decided.sandbox.is_some() || !decided.start.is_empty()) {
            // The pod's first status (Pending, `ContainerCreating`, its
            // addresses and start time) before its volumes, sandbox and
            // images, which may take long: the kubelet writes it before
            // `SyncPod`.
            self.write_status(&pod, &decided).await;
        }
        let mut retry = None;
        // Nothing is made before its volumes are set up.
        let hold = !self.volumes_ready(&pod).await;
        if hold {
            retry = self.volume_setup.due_at();
        }
        if let Some(attempt) = decided.sandbox.filter(|_| !hold) {
            if self.make_sandbox(&pod, attempt, &observed).await {
                observed = observe(self.context.runtime.as_ref(), &self.pod_ref.uid).await?;
                decided = self.plan(&pod, &observed, now);
            } else {
                retry = Some(tokio::time::Instant::now() + SYNC_BACKOFF.delay(1));
            }
        }
        let mut started = false;
        if decided.sandbox.is_none()
            && !hold
            && let Some(sandbox) =
                observed_sandbox(self.context.runtime.as_ref(), &self.pod_ref.uid).await?
        {
            let spec = self.sandbox_spec(&pod, sandbox.1);
            for start in decided.start.clone() {
                let Some(container) = find_container(&pod, &start.name) else {
                    continue;
                };
                match self
                    .start(&pod, &sandbox.0, &spec, container, start.attempt)
                    .await
                {
                    Ok(()) => {
                        self.start_errors.remove(&start.name);
                        if let Some(finished) = start.restart {
                            self.backoff.restarted(
                                &backoff_key(container),
                                finished,
                                SystemTime::now(),
                            );
                        }
                        started = true;
                    }
                    Err((reason, message)) => {
                        if reason == POST_START_HOOK_ERROR {
                            // It ran, and was killed: a restart all the same.
                            if let Some(finished) = start.restart {
                                self.backoff.restarted(
                                    &backoff_key(container),
                                    finished,
                                    SystemTime::now(),
                                );
                            }
                            started = true;
                        }
                        tracing::warn!(container = %start.name, %reason, %message, "cannot start the container; trying again");
                        self.start_errors
                            .insert(start.name.clone(), (reason, message));
                        retry = Some(tokio::time::Instant::now() + SYNC_BACKOFF.delay(1));
                    }
                }
            }
            // A replaced container is made again once: a start that failed
            // is then retried only as its restart policy says.
            self.replaced.clear();
        }
        if started {
            // Show what was started.
            observed = observe(self.context.runtime.as_ref(), &self.pod_ref.uid).await?;
            decided = self.plan(&pod, &observed, SystemTime::now());
        }
        if decided.phase.is_terminal()
            && decided
                .containers
                .iter()
                .any(|c| c.kind == ContainerKind::Sidecar && c.running())
        {
            // Its terminal status shows its sidecars stopped.
            decided = self.stop_sidecars(&pod).await?;
        }
        self.show_probes(&observed);
        self.tell_backoffs(&pod, &decided);
        let phase = self.write_status(&pod, &decided).await;
        let wake = decided
            .wake_at
            .map(|at| {
                let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
                tokio::time::Instant::now() + wait
            })
            .into_iter()
            .chain(retry)
            .chain(self.volumes_resync_at)
            .min();
        Ok((phase, wake))
    }

    /// A Warning `BackOff` for each container that waits out its
    /// crash-loop back-off, once per exit, as the kubelet's `doBackOff`
    /// records it.
    fn tell_backoffs(&mut self, pod: &Pod, decided: &SyncPlan) {
        for view in &decided.containers {
            let waits = view
                .waiting
                .as_ref()
                .is_some_and(|(reason, _)| reason == CRASH_LOOP_BACK_OFF);
            let Some(exited) = view.previous.as_ref().filter(|_| waits) else {
                continue;
            };
            if self.backoff_told.get(&view.name) == Some(&exited.attempt) {
                continue;
            }
            self.backoff_told.insert(view.name.clone(), exited.attempt);
            let pod_name = format!(
                "{}_{}({})",
                self.pod_ref.name, self.pod_ref.namespace, self.pod_ref.uid
            );
            self.container_event(
                pod,
                &view.name,
                "Warning",
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {pod_name}",
                    view.name
                ),
            );
        }
    }

    /// What `pod` needs now that the runtime shows `observed`, its probes,
    /// back-offs and start errors as the worker has them.
    fn plan(&self, pod: &Pod, observed: &Observed, now: SystemTime) -> SyncPlan {
        plan(
            pod,
            observed,
            &self.verdicts(observed),
            &self.backoff,
            &self.start_errors,
            &self.replaced,
            now,
        )
    }

    /// Makes the pod's sandbox of `attempt`, in place of `observed`'s;
    /// whether it was made. A failure is logged and recorded on the pod
    /// (`FailedCreatePodSandBox`, as the kubelet's).
    async fn make_sandbox(&self, pod: &Pod, attempt: u32, observed: &Observed) -> bool {
        let mut spec = self.sandbox_spec(pod, attempt);
        let class = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref());
        spec.runtime_handler = match self.context.informers.runtime_handler(class).await {
            Ok(handler) => handler,
            Err(e) => {
                tracing::warn!(error = %e, "cannot find the pod's runtime handler; trying again");
                self.event(
                    FAILED_CREATE_POD_SANDBOX,
                    format!("Failed to create pod sandbox: {e}"),
                );
                return false;
            }
        };
        spec.dns = match self.pod_dns(pod) {
            Ok(dns) => dns,
            Err(e) => {
                // The kubelet's sandbox config fails with it: no sandbox
                // until the node's resolver file reads.
                tracing::warn!(error = %e, "cannot make the pod's resolver settings; trying again");
                self.event(
                    FAILED_CREATE_POD_SANDBOX,
                    format!("Failed to create pod sandbox: {e}"),
                );
                return false;
            }
        };
        if let Some(dir) = &self.context.pod_logs {
            let dir = dir.join(&spec.log_directory);
            if let Err(e) = tokio::fs::create_dir_all(&dir).await {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot make the pod's log directory");
            }
        }
        if let Some(old) = &observed.sandbox {
            // Its containers start over in the new one; the old one is
            // kept stopped (its containers count the restarts) until the
            // pod goes.
            let _ = self.context.runtime.stop_sandbox(&old.id).await;
        }
        match self.context.runtime.run_sandbox(&spec).await {
            Ok(id) => {
                tracing::info!(sandbox = %id, attempt, "sandbox made");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot make the pod's sandbox; trying again");
                self.event(
                    FAILED_CREATE_POD_SANDBOX,
                    format!("Failed to create pod sandbox: {}", e.go_text()),
                );
                false
            }
        }
    }

    /// The pod's sandbox of `attempt`.
    fn sandbox_spec(&self, pod: &Pod, attempt: u32) -> SandboxSpec {
        let logs = self
            .context
            .pod_logs
            .as_deref()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        sandbox_spec(pod, attempt, &logs)
    }

    /// The pod's resolver settings, with a real runtime (the simulated
    /// one resolves nothing); the warnings made on the way recorded on
    /// the pod.
    fn pod_dns(&self, pod: &Pod) -> Result<Option<DnsSpec>, String> {
        if self.context.pods_dir.is_none() {
            return Ok(None);
        }
        let config = self.context.dns.as_ref();
        let host = host_dns(config.resolv_conf.as_deref())?;
        let PodDns { spec, warnings } = pod_dns(config, pod, host);
        for (reason, message) in warnings {
            tracing::warn!(%reason, %message, "the pod's resolver settings");
            self.event(reason, message);
        }
        Ok(Some(spec))
    }
}

/// Waits for a probe's result to change (never without probes).
async fn probe_results(prober: Option<&Option<PodProber>>) {
    match prober.and_then(Option::as_ref) {
        Some(prober) => prober.results().changed().await,
        None => std::future::pending().await,
    }
}

/// Waits for a lifecycle event of pod `uid` (any event after a lag).
async fn next_event(events: &mut broadcast::Receiver<LifecycleEvent>, uid: &str) {
    loop {
        match events.recv().await {
            Ok(event) if event.concerns(uid) => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    containers(pod)
        .into_iter()
        .map(|(c, _)| c)
        .find(|c| c.name == name)
}

/// The pod's latest ready sandbox: (id, attempt).
async fn observed_sandbox(
    runtime: &dyn ContainerRuntime,
    uid: &str,
) -> Result<Option<(String, u32)>, RuntimeError> {
    Ok(runtime
        .sandboxes()
        .await?
        .into_iter()
        .filter(|s| s.pod.uid == uid && s.ready)
        .max_by_key(|s| (s.attempt, s.created_at))
        .map(|s| (s.id, s.attempt)))
}

/// What the runtime shows of pod `uid`: its latest sandbox, and in it each
/// container's latest two attempts, in full; and each container whose
/// latest attempt ended in an earlier sandbox, in full.
pub(crate) async fn observe(
    runtime: &dyn ContainerRuntime,
    uid: &str,
) -> Result<Observed, RuntimeError> {
    let sandbox = runtime
        .sandboxes()
        .await?
        .into_iter()
        .filter(|s| s.pod.uid == uid)
        .max_by_key(|s| (s.attempt, s.created_at));
    let mut observed = Observed {
        sandbox,
        ..Observed::default()
    };
    let Some(sandbox) = &observed.sandbox else {
        return Ok(observed);
    };
    let mut by_name: BTreeMap<String, Vec<crate::runtime::ContainerStatus>> = BTreeMap::new();
    let mut elsewhere: BTreeMap<String, crate::runtime::ContainerStatus> = BTreeMap::new();
    for c in runtime.containers().await? {
        if c.pod.uid != uid {
            continue;
        }
        let next = observed.next_attempts.entry(c.name.clone()).or_default();
        *next = (*next).max(c.attempt + 1);
        if c.sandbox_id == sandbox.id {
            by_name.entry(c.name.clone()).or_default().push(c);
        } else if elsewhere
            .get(&c.name)
            .is_none_or(|e| (e.attempt, e.created_at) < (c.attempt, c.created_at))
        {
            elsewhere.insert(c.name.clone(), c);
        }
    }
    for (name, c) in elsewhere {
        if !by_name.contains_key(&name) && c.state == ContainerState::Exited {
            observed.ended_before.insert(name, full(runtime, c).await?);
        }
    }
    for (name, mut all) in by_name {
        all.sort_by_key(|c| (c.attempt, c.created_at));
        let latest = all.pop();
        let previous = all.pop();
        let Some(latest) = latest else { continue };
        let latest = full(runtime, latest).await?;
        let previous = match previous {
            Some(p) => Some(full(runtime, p).await?),
            None => None,
        };
        observed.containers.insert(name, (latest, previous));
    }
    Ok(observed)
}

/// A container's full status (a listing leaves out times and exit codes).
async fn full(
    runtime: &dyn ContainerRuntime,
    listed: crate::runtime::ContainerStatus,
) -> Result<crate::runtime::ContainerStatus, RuntimeError> {
    match runtime.container_status(&listed.id).await {
        Ok(status) => Ok(status),
        Err(e) if e.is_not_found() => Ok(listed),
        Err(e) => Err(e),
    }
}

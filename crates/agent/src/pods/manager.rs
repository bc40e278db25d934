//! The pods owner's task: it follows the pods bound to the node (the
//! watch), decides for each what to do next ([`Tracked`]), runs one
//! operation per pod at a time on a `JoinSet` (admitting, running its
//! containers, or stopping them and giving back: slow work outside the
//! task), and reconciles: whatever the device manager or the DRA manager
//! holds, or the runtime runs, for a pod UID the API does not have as an
//! active pod is stopped and given back. It wakes for a watch event, the
//! end of an operation, a worker's report, a retry falling due, the
//! admission gate opening, a plugin serving more, and the reconcile
//! period.
//!
//! An admitted pod's worker ([`Worker`]) runs its containers until the pod
//! ends (then it is released) or is deleted, gone or ended in the API
//! (then the worker is told to stop, and the release stops its containers
//! within the grace period before anything is given back, and deletes the
//! deleted pod last).
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
use nodeplugins_api::retry::Retry;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::PodsConfig;
use super::handle::PodsHandle;
use super::informers::{InformerWriters, Informers};
use super::kube_events::PodEvents;
use crate::csi::CsiDriverStore;
use crate::device::DeviceHandle;
use crate::dra::DraHandle;
use crate::event::AgentEvent;
use crate::kube_api::{Connection, KubeApiHandle};
use crate::pods::admit::admission::Admitter;
use crate::pods::admit::claims::PodClaimsReader;
use crate::pods::admit::served::Served;
use crate::pods::lifecycle::admission_gate::AdmissionGate;
use crate::pods::lifecycle::operation::Operations;
use crate::pods::lifecycle::owner::Owner;
use crate::pods::lifecycle::shutdown_requests::{Kills, ShutdownRequest};
use crate::pods::lifecycle::watch::watch_pods;
use crate::pods::run::lifecycle_events::generate;
use crate::pods::run::lifecycle_metrics::LifecycleMetrics;
use crate::pods::run::probes::ProberMetrics;
use crate::pods::run::worker::{NodeFacts, WorkerContext};
use crate::pods::snapshot::PodsSnapshot;
use crate::pods::static_pods::mirror::{MirrorSync, Mirrors};
use crate::pods::static_pods::source::{StaticPods, follow};
use crate::pods::status::status_writer::StatusWriter;
use crate::pods::teardown::release::Releaser;
use crate::published::Publisher;
use crate::runtime::ContainerRuntime;
use crate::volumes::VolumeHandle;

/// The pods owner's task. [`new`](Self::new) gives it with its
/// [`PodsHandle`]; [`run`](Self::run) it.
pub struct PodsManager {
    config: PodsConfig,
    admitter: Admitter,
    warnings: PodEvents,
    connection: watch::Receiver<Connection>,
    snapshot: Publisher<PodsSnapshot>,
    events: broadcast::Sender<AgentEvent>,
    runtime: Arc<dyn ContainerRuntime>,
    writer: StatusWriter,
    /// The informers' writers, until `run` starts their watches.
    informer_writers: InformerWriters,
    /// The volume manager, when pods get files (a real runtime).
    volumes: Option<VolumeHandle>,
    /// The pods bound to the node, as the watch keeps them, and its writer.
    pods: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Pod>,
    pods_writer: kube::runtime::reflector::store::Writer<k8s_openapi::api::core::v1::Pod>,
    /// Where the static pods are published, with a static pod path.
    static_pods: Option<watch::Sender<StaticPods>>,
    /// What the node shutdown manager asks.
    shutdown_requests: mpsc::UnboundedReceiver<ShutdownRequest>,
    /// The pods' probes' metrics.
    prober_metrics: ProberMetrics,
    /// The hooks' metrics.
    lifecycle_metrics: LifecycleMetrics,
}

impl PodsManager {
    /// The owner of the pods bound to `config`'s node, admitting them with
    /// `devices` and `dra`, their CSI volumes set up by the drivers of
    /// `csi_drivers`, running them on `runtime`, reading and writing
    /// them with `kube`'s client and reading the node's Node from `kube`'s
    /// watch of it (the publisher must run), and its handle.
    pub fn new(
        config: PodsConfig,
        devices: DeviceHandle,
        dra: DraHandle,
        csi_drivers: CsiDriverStore,
        runtime: Arc<dyn ContainerRuntime>,
        kube: &KubeApiHandle,
    ) -> (Self, PodsHandle) {
        let connection = kube.connection();
        let (snapshot, store) = Publisher::new(PodsSnapshot::default());
        let events = broadcast::channel(1024).0;
        let claims = PodClaimsReader::new(connection.clone(), config.node_name.clone());
        let (informers, informer_writers) = Informers::new(
            config.node_name.clone(),
            kube.node(),
            config.request_timeout,
        );
        let (pods, pods_writer) = kube::runtime::reflector::store();
        let static_pods = config.static_pods.as_ref().map(|_| watch::channel(None).0);
        let (shutdown_tx, shutdown_requests) = mpsc::unbounded_channel();
        let prober_metrics = ProberMetrics::default();
        let lifecycle_metrics = LifecycleMetrics::default();
        let handle = PodsHandle {
            prober_metrics: prober_metrics.clone(),
            lifecycle_metrics: lifecycle_metrics.clone(),
            shutdown_requests: shutdown_tx,
            serving: config.serve,
            bound: pods.clone(),
            store,
            events: events.clone(),
            claims: claims.clone(),
            dra: dra.clone(),
            volume_stats: None,
            csi_operations: None,
            pod_certificate_states: None,
            static_pods: static_pods.as_ref().map(watch::Sender::subscribe),
        };
        let writer = StatusWriter::new(connection.clone(), claims.limiter());
        let warnings = PodEvents::new(connection.clone(), config.node_name.clone());
        let volumes = config.pods_dir.clone().map(|dir| {
            VolumeHandle::new(
                dir,
                config.node_name.clone(),
                kube,
                csi_drivers,
                config.volume_stats_agg_period,
            )
        });
        let handle = PodsHandle {
            volume_stats: volumes.as_ref().map(VolumeHandle::stats),
            csi_operations: volumes.as_ref().map(VolumeHandle::csi_operations),
            pod_certificate_states: volumes.as_ref().map(VolumeHandle::pod_certificate_states),
            ..handle
        };
        let manager = Self {
            shutdown_requests,
            pods,
            pods_writer,
            static_pods,
            volumes,
            admitter: Admitter {
                devices,
                dra,
                claims,
                informers,
            },
            informer_writers,
            warnings,
            connection,
            snapshot,
            events,
            config,
            runtime,
            writer,
            prober_metrics,
            lifecycle_metrics,
        };
        (manager, handle)
    }

    /// Serves the node's pods until `shutdown` (when the configuration
    /// says so; otherwise only publishes that it does not).
    pub async fn run(self, shutdown: CancellationToken) {
        if !self.config.serve {
            self.snapshot.publish(PodsSnapshot {
                running: true,
                ..PodsSnapshot::default()
            });
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
        if let Some(record) = &self.config.boot_record
            && super::boot::rebooted(record, &super::boot::current_boot_id())
            && super::boot::after_reboot(&self.admitter.devices, &self.admitter.dra)
                .await
                .is_err()
        {
            return;
        }
        let tasks = TaskTracker::new();
        self.admitter
            .informers
            .start(self.informer_writers, &self.connection, &tasks, &shutdown);
        let (watch_tx, watch_rx) = mpsc::unbounded_channel();
        let pods = self.pods;
        tasks.spawn(watch_pods(
            self.connection.clone(),
            self.config.node_name.clone(),
            self.pods_writer,
            watch_tx,
            shutdown.clone(),
        ));
        // The static pods, followed from their path, and their mirror
        // pods kept in step.
        let mirrors_changed = Arc::new(Notify::new());
        let static_pods =
            self.config
                .static_pods
                .clone()
                .zip(self.static_pods)
                .map(|(config, sender)| {
                    let receiver = sender.subscribe();
                    tasks.spawn(follow(
                        config,
                        self.config.node_name.clone(),
                        self.config.fs_watcher.clone(),
                        sender,
                        shutdown.clone(),
                    ));
                    let sync = MirrorSync {
                        connection: self.connection.clone(),
                        node_name: self.config.node_name.clone(),
                        pods: pods.clone(),
                        informers: self.admitter.informers.clone(),
                        static_pods: receiver.clone(),
                        changed: mirrors_changed.clone(),
                    };
                    tasks.spawn(sync.run(shutdown.clone()));
                    receiver
                });
        let lifecycle = broadcast::channel(1024).0;
        tasks.spawn(generate(
            self.runtime.clone(),
            lifecycle.clone(),
            shutdown.clone(),
        ));
        let (reports_tx, reports) = mpsc::unbounded_channel();
        let volumes = self.volumes.clone();
        if let Some(volumes) = volumes.clone() {
            tasks.spawn(async move { volumes.sync().await });
        }
        let node = Arc::new(NodeFacts::new(
            self.config.node_ip.clone(),
            self.admitter.informers.clone(),
        ));
        let worker_context = WorkerContext {
            runtime: self.runtime.clone(),
            node: node.clone(),
            devices: self.admitter.devices.clone(),
            dra: self.admitter.dra.clone(),
            writer: self.writer.clone(),
            events: lifecycle,
            reports: reports_tx,
            pod_logs: self.config.pod_logs_dir.clone(),
            pods_dir: self.config.pods_dir.clone(),
            informers: self.admitter.informers.clone(),
            volumes: volumes.clone(),
            pod_events: self.warnings.clone(),
            dns: Arc::new(self.config.dns.clone()),
            mirrors: Mirrors::new(pods.clone()),
            resync: Backoff::new(self.config.sync_frequency, self.config.sync_frequency)
                .with_jitter(0.5),
            started: (SystemTime::now(), tokio::time::Instant::now()),
            prober_metrics: self.prober_metrics.clone(),
            lifecycle_metrics: self.lifecycle_metrics.clone(),
        };
        let releaser = Releaser {
            pods_dir: self.config.pods_dir.clone(),
            runtime: self.runtime.clone(),
            devices: self.admitter.devices.clone(),
            dra: self.admitter.dra.clone(),
            writer: self.writer.clone(),
            volumes: volumes.clone(),
            pod_events: self.warnings.clone(),
            node,
            lifecycle_metrics: self.lifecycle_metrics.clone(),
        };
        tracing::info!(node = %self.config.node_name, "serving the node's pods");
        let backoff = Backoff::new(self.config.retry_initial, self.config.retry_max)
            .with_jitter(self.config.retry_jitter);
        let mut owner = Owner {
            next_reconcile: Instant::now() + self.config.reconcile_period,
            config: self.config,
            operations: Arc::new(Operations {
                admitter: self.admitter,
                worker_context,
                releaser,
                pods: pods.clone(),
                kills: Kills::default(),
            }),
            warnings: self.warnings,
            reports,
            tracked: HashMap::new(),
            listed: false,
            ops: JoinSet::new(),
            running: HashMap::new(),
            gate: AdmissionGate::new(),
            gate_wanted: false,
            served: Served::default(),
            watch: watch_rx,
            pods,
            static_pods,
            mirrors_changed,
            watch_failures: Retry::default(),
            backoff,
            dirty: HashSet::new(),
            rows: BTreeMap::new(),
            generation: 0,
            snapshot: self.snapshot,
            events: self.events,
            requests: self.shutdown_requests,
            node_shutting_down: false,
            kill_waits: Vec::new(),
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        };
        owner.publish();
        owner.run().await;
        tasks.close();
        tasks.wait().await;
    }
}

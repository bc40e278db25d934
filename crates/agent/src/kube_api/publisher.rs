//! The task that owns every write to the API server. Each kind keeps only
//! the latest state to write: a change marks it dirty, a write starts when
//! none of its kind runs (the node status after a short settle, so a burst
//! of changes is one write), and a failed write is retried with backoff.
//! Nothing is written while nothing changes, and no caller ever waits for
//! the API server except the DRA cleanup hook, which the DRA manager runs
//! in a task of its own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client;
use super::config::KubeApiConfig;
use super::csi_node::{self, CsiDrivers};
use super::error::KubeApiError;
use super::event::{KubeEvent, KubeEventKind};
use super::metrics::KubeApiMetrics;
use super::node_status::{self, NodeResources};
use super::resource_slices::{self, Deleted, ResourceSliceCleanup};
use super::status::{KubeApiStatus, WriteKind};
use crate::csi::CsiDriverStore;
use crate::device::DeviceHandle;
use crate::owner::Mailbox;
use crate::retry::delay_after;
use crate::timer::sleep_until;
use crate::unix_time::unix_ms;

/// What the task is told.
pub(crate) enum Command {
    /// Delete the node's ResourceSlices, or one driver's.
    DeleteSlices {
        driver: Option<String>,
        reply: Deleted,
    },
    Status {
        reply: oneshot::Sender<KubeApiStatus>,
    },
}

/// The API publisher has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the API publisher is not running")]
pub struct KubeApiStopped;

/// Publishes the node's plugins to the API server. Take a
/// [`handle`](Self::handle) and the [`slice_cleanup`](Self::slice_cleanup)
/// hook for the DRA manager, then [`run`](Self::run) it.
pub struct KubeApi {
    config: KubeApiConfig,
    client: kube::Client,
    server: String,
    commands_tx: Mailbox<Command>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: broadcast::Sender<KubeEvent>,
    metrics: KubeApiMetrics,
}

impl KubeApi {
    /// A publisher for `config`'s node; reads the configuration but sends
    /// nothing yet.
    pub async fn connect(config: KubeApiConfig) -> Result<Self, KubeApiError> {
        let (client, server) = client::connect(&config.source).await?;
        let (commands_tx, commands) = Mailbox::new();
        Ok(Self {
            config,
            client,
            server,
            commands_tx,
            commands,
            events: broadcast::channel(256).0,
            metrics: KubeApiMetrics::default(),
        })
    }

    /// A handle for status, events and metrics.
    pub fn handle(&self) -> KubeApiHandle {
        KubeApiHandle {
            commands: self.commands_tx.clone(),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Reads pods and their claims through this publisher's client, for
    /// pod-level prepare.
    pub fn pod_claims(&self) -> super::PodClaimsReader {
        super::PodClaimsReader::new(self.client.clone(), self.config.request_timeout)
    }

    /// The DRA cleanup hook that deletes ResourceSlices through this publisher.
    pub fn slice_cleanup(&self) -> ResourceSliceCleanup {
        ResourceSliceCleanup {
            commands: self.commands_tx.clone(),
        }
    }

    /// Publishes `devices`' resources and `csi`'s drivers until `shutdown`.
    pub async fn run(
        self,
        devices: DeviceHandle,
        csi: CsiDriverStore,
        shutdown: CancellationToken,
    ) {
        tracing::info!(server = %self.server, node = %self.config.node_name, "publishing to the Kubernetes API");
        let owner = Owner {
            device_changes: devices.changes(),
            csi_changes: csi.changes(),
            devices,
            csi,
            config: self.config,
            client: self.client,
            server: self.server,
            commands: self.commands,
            events: self.events,
            metrics: self.metrics,
            node_status: Sync::dirty_now(),
            published_resources: BTreeSet::new(),
            csi_node: Sync::dirty_now(),
            published_drivers: BTreeSet::new(),
            slices: SliceDeletes::default(),
            writes: JoinSet::new(),
            last_success: None,
        };
        owner.run(shutdown).await;
    }
}

/// Reads the publisher's status and events. Cheap to clone.
#[derive(Clone)]
pub struct KubeApiHandle {
    commands: Mailbox<Command>,
    events: broadcast::Sender<KubeEvent>,
    metrics: KubeApiMetrics,
}

impl KubeApiHandle {
    /// The connection's status.
    pub async fn status(&self) -> Result<KubeApiStatus, KubeApiStopped> {
        self.commands
            .ask(|reply| Command::Status { reply })
            .await
            .map_err(|_| KubeApiStopped)
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<KubeEvent> {
        self.events.subscribe()
    }

    /// The writes' metrics.
    pub fn metrics(&self) -> &KubeApiMetrics {
        &self.metrics
    }
}

/// One kind of latest-state-wins write.
struct Sync<T> {
    /// The state changed since it was last computed.
    dirty: bool,
    /// When the next write may start (after the settle, or the backoff).
    due: Instant,
    /// What the server has, as far as the agent knows.
    written: Option<T>,
    in_flight: bool,
    failures: u32,
    last_error: Option<String>,
}

impl<T> Sync<T> {
    fn dirty_now() -> Self {
        Self {
            dirty: true,
            due: Instant::now(),
            written: None,
            in_flight: false,
            failures: 0,
            last_error: None,
        }
    }

    /// Marks the state changed; the write starts `settle` from now unless
    /// one is already due or backing off.
    fn mark(&mut self, settle: std::time::Duration) {
        if !self.dirty && self.failures == 0 {
            self.due = Instant::now() + settle;
        }
        self.dirty = true;
    }

    fn ready(&self, now: Instant) -> bool {
        self.dirty && !self.in_flight && self.due <= now
    }

    fn pending(&self) -> bool {
        self.dirty || self.in_flight || self.failures > 0
    }
}

/// Slice deletions in progress and how the last one ended.
#[derive(Default)]
struct SliceDeletes {
    in_flight: usize,
    failures: u32,
    last_error: Option<String>,
}

/// The end of one write.
enum Done {
    NodeStatus {
        desired: NodeResources,
        result: Result<(), KubeApiError>,
    },
    CsiNode {
        desired: CsiDrivers,
        result: Result<(), KubeApiError>,
    },
    Slices {
        reply: Deleted,
        result: Result<(), KubeApiError>,
    },
    /// The state was already written: nothing was sent.
    Unchanged(WriteKind),
}

struct Owner {
    config: KubeApiConfig,
    client: kube::Client,
    server: String,
    devices: DeviceHandle,
    device_changes: watch::Receiver<u64>,
    csi: CsiDriverStore,
    csi_changes: watch::Receiver<u64>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: broadcast::Sender<KubeEvent>,
    metrics: KubeApiMetrics,
    node_status: Sync<NodeResources>,
    /// Every resource written this run: written as 0 once it is gone.
    published_resources: BTreeSet<String>,
    csi_node: Sync<CsiDrivers>,
    /// Every CSI driver written this run: removed once it is gone.
    published_drivers: BTreeSet<String>,
    slices: SliceDeletes,
    writes: JoinSet<Done>,
    last_success: Option<SystemTime>,
}

impl Owner {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            self.start_due_writes();
            self.metrics.set_pending(self.pending().len());
            let next = self.next_due();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(command) = self.commands.recv() => self.on_command(command),
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => {
                    if let Ok(done) = done {
                        self.on_done(done);
                    }
                }
                Ok(()) = self.device_changes.changed() => self.node_status.mark(self.config.settle),
                Ok(()) = self.csi_changes.changed() => self.csi_node.mark(self.config.settle),
                () = sleep_until(next) => {}
            }
        }
        self.writes.abort_all();
    }

    fn pending(&self) -> Vec<WriteKind> {
        let mut pending = Vec::new();
        if self.node_status.pending() {
            pending.push(WriteKind::NodeStatus);
        }
        if self.csi_node.pending() {
            pending.push(WriteKind::CsiNode);
        }
        if self.slices.in_flight > 0 || self.slices.failures > 0 {
            pending.push(WriteKind::ResourceSlices);
        }
        pending
    }

    fn next_due(&self) -> Option<Instant> {
        [&self.node_status.dirty, &self.csi_node.dirty]
            .into_iter()
            .zip([self.node_status.due, self.csi_node.due])
            .zip([self.node_status.in_flight, self.csi_node.in_flight])
            .filter(|((dirty, _), in_flight)| **dirty && !in_flight)
            .map(|((_, due), _)| due)
            .min()
    }

    fn start_due_writes(&mut self) {
        let now = Instant::now();
        if self.node_status.ready(now) {
            self.node_status.dirty = false;
            self.node_status.in_flight = true;
            let (client, node, timeout) = self.request_parts();
            let devices = self.devices.clone();
            let published = self.published_resources.clone();
            let written = self.node_status.written.clone();
            self.writes.spawn(async move {
                let Ok(resources) = devices.status().await else {
                    return Done::Unchanged(WriteKind::NodeStatus);
                };
                let desired = node_status::desired(&resources, &published);
                if written.as_ref() == Some(&desired) {
                    return Done::Unchanged(WriteKind::NodeStatus);
                }
                let result = node_status::write(&client, &node, &desired, timeout).await;
                Done::NodeStatus { desired, result }
            });
        }
        if self.csi_node.ready(now) {
            self.csi_node.dirty = false;
            self.csi_node.in_flight = true;
            let (client, node, timeout) = self.request_parts();
            let desired = csi_node::desired(&self.csi.list());
            if self.csi_node.written.as_ref() == Some(&desired) {
                self.csi_node.in_flight = false;
                return;
            }
            let removed: BTreeSet<String> = self
                .published_drivers
                .iter()
                .filter(|d| !desired.contains_key(*d))
                .cloned()
                .collect();
            self.writes.spawn(async move {
                let result = csi_node::write(&client, &node, &desired, &removed, timeout).await;
                Done::CsiNode { desired, result }
            });
        }
    }

    fn request_parts(&self) -> (kube::Client, String, std::time::Duration) {
        (
            self.client.clone(),
            self.config.node_name.clone(),
            self.config.request_timeout,
        )
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::DeleteSlices { driver, reply } => {
                let (client, node, timeout) = self.request_parts();
                let selector = resource_slices::field_selector(&node, driver.as_deref());
                self.slices.in_flight += 1;
                self.writes.spawn(async move {
                    let result = resource_slices::delete(&client, &selector, timeout).await;
                    Done::Slices { reply, result }
                });
            }
            Command::Status { reply } => {
                let last_error = [
                    &self.node_status.last_error,
                    &self.csi_node.last_error,
                    &self.slices.last_error,
                ]
                .into_iter()
                .flatten()
                .next()
                .cloned();
                let failures = self
                    .node_status
                    .failures
                    .max(self.csi_node.failures)
                    .max(self.slices.failures);
                let _ = reply.send(KubeApiStatus {
                    server: self.server.clone(),
                    node: self.config.node_name.clone(),
                    last_success_unix_ms: self.last_success.map(unix_ms),
                    pending: self.pending(),
                    last_error,
                    failures,
                });
            }
        }
    }

    fn on_done(&mut self, done: Done) {
        match done {
            Done::Unchanged(WriteKind::NodeStatus) => self.node_status.in_flight = false,
            Done::Unchanged(_) => self.csi_node.in_flight = false,
            Done::NodeStatus { desired, result } => {
                let ok = result.is_ok();
                if ok {
                    self.published_resources.extend(desired.keys().cloned());
                }
                let event = settle(&mut self.node_status, desired, result, &self.config);
                self.finish(WriteKind::NodeStatus, ok, event);
            }
            Done::CsiNode { desired, result } => {
                let ok = result.is_ok();
                if ok {
                    self.published_drivers = desired.keys().cloned().collect();
                }
                let event = settle(&mut self.csi_node, desired, result, &self.config);
                self.finish(WriteKind::CsiNode, ok, event);
            }
            Done::Slices { reply, result } => {
                self.slices.in_flight = self.slices.in_flight.saturating_sub(1);
                let ok = result.is_ok();
                let event = match &result {
                    Ok(()) => {
                        let recovered = self.slices.failures > 0;
                        self.slices.failures = 0;
                        self.slices.last_error = None;
                        recovered.then_some((KubeEventKind::CaughtUp, None))
                    }
                    Err(e) => {
                        self.slices.failures += 1;
                        let error = e.to_string();
                        let repeated = self.slices.last_error.as_ref() == Some(&error);
                        self.slices.last_error = Some(error.clone());
                        (!repeated).then_some((KubeEventKind::WriteFailed, Some(error)))
                    }
                };
                let _ = reply.send(result.map_err(Arc::new));
                self.finish(WriteKind::ResourceSlices, ok, event);
            }
        }
    }

    /// Counts a finished write, and tells about it when there is news.
    fn finish(
        &mut self,
        kind: WriteKind,
        ok: bool,
        event: Option<(KubeEventKind, Option<String>)>,
    ) {
        self.metrics.wrote(kind, ok);
        if ok {
            self.last_success = Some(SystemTime::now());
        }
        if let Some((event, detail)) = event {
            match &detail {
                Some(error) => {
                    tracing::warn!(write = %kind, %error, "Kubernetes API write failed; retrying with backoff")
                }
                None => tracing::info!(write = %kind, "Kubernetes API has the latest state again"),
            }
            let _ = self.events.send(KubeEvent {
                kind: event,
                write: kind,
                detail,
                at_unix_ms: unix_ms(SystemTime::now()),
            });
        }
    }
}

/// Records the end of a write of `desired`: on success it is what the server
/// has; on failure the state stays dirty and the next attempt waits out the
/// backoff. Returns the event to tell (a new error, or recovery).
fn settle<T>(
    sync: &mut Sync<T>,
    desired: T,
    result: Result<(), KubeApiError>,
    config: &KubeApiConfig,
) -> Option<(KubeEventKind, Option<String>)> {
    sync.in_flight = false;
    match result {
        Ok(()) => {
            sync.written = Some(desired);
            let recovered = sync.failures > 0;
            sync.failures = 0;
            sync.last_error = None;
            recovered.then_some((KubeEventKind::CaughtUp, None))
        }
        Err(e) => {
            sync.failures += 1;
            sync.dirty = true;
            sync.due =
                Instant::now() + delay_after(sync.failures, config.retry_initial, config.retry_max);
            // What the server has is no longer known for sure.
            sync.written = None;
            let error = e.to_string();
            let repeated = sync.last_error.as_ref() == Some(&error);
            sync.last_error = Some(error.clone());
            (!repeated).then_some((KubeEventKind::WriteFailed, Some(error)))
        }
    }
}

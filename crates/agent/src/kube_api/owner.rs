//! The task that owns every write to the API server. Each kind keeps only
//! the latest state to write: a change marks it dirty, a write starts when
//! none of its kind runs (after a short settle, so a burst of changes is
//! one write), and a failed write is retried as its error calls for. The
//! Node and CSINode are watched, and a difference from what was written
//! (a Node made again, another writer, a lost write) marks the write dirty
//! again. Nothing is written while nothing changes, and no caller ever
//! waits for the API server.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use kube::runtime::reflector::store::Writer;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::KubeApiConfig;
use super::credentials::Connection;
use super::csi_node::{self, CsiDrivers};
use super::error::{KubeApiError, request};
use super::identity::{self, WhoAmI};
use super::metrics::KubeApiMetrics;
use super::node_status::{self, NodeResources};
use super::observed::{self, CsiNodeFollow, CsiNodeWatch, NodeWatch, Seen, next_csinode};
use super::resource_slices::WipeReport;
use super::status::{KubeApiStatus, WriteKind};
use super::write_state::{RetryPolicy, WriteState};
use crate::csi::CsiDriverStore;
use crate::device::DeviceHandle;
use crate::event::{AgentEvent, EventKind, EventSubject};
use crate::published::Publisher;
use crate::unix_time::unix_ms;
use nodeplugins_api::retry::{Retry, Said};
use nodeplugins_api::timer::sleep_until;

mod csi;
#[cfg(test)]
mod tests;

/// The end of one piece of work done outside the task.
enum Done {
    NodeStatus {
        desired: NodeResources,
        result: Result<Box<Node>, KubeApiError>,
    },
    CsiNode {
        desired: CsiDrivers,
        /// The CSINode as the write left it.
        result: Result<Box<CSINode>, KubeApiError>,
    },
    /// The node status was already written: nothing was sent.
    NodeStatusUnchanged,
    Identity(Result<WhoAmI, KubeApiError>),
    CsiNodeRead(Result<Option<Box<CSINode>>, KubeApiError>),
}

pub(super) struct Owner {
    pub(super) config: KubeApiConfig,
    pub(super) policy: RetryPolicy,
    pub(super) connection: watch::Receiver<Connection>,
    pub(super) devices: DeviceHandle,
    pub(super) csi: CsiDriverStore,
    pub(super) wipes: mpsc::UnboundedReceiver<WipeReport>,
    pub(super) events: broadcast::Sender<AgentEvent>,
    pub(super) metrics: KubeApiMetrics,
    pub(super) status: Publisher<KubeApiStatus>,
    /// Kept current by the Node watch, for the pods.
    pub(super) node_mirror: Option<Writer<Node>>,
}

struct State {
    node_status: WriteState<NodeResources>,
    /// Every resource written by the agent, this run or before (from the
    /// Node's managed fields): written as 0 once it is gone.
    owned_resources: BTreeSet<String>,
    csi_node: WriteState<CsiDrivers>,
    /// Every CSI driver a write was started for: removed once it is gone,
    /// whatever a failed write may have left.
    published_drivers: BTreeSet<String>,
    wipe_failures: Retry<Arc<KubeApiError>>,
    /// The Node as last seen (`None`: it does not exist, or not yet known).
    node: Option<Arc<Node>>,
    csinode: Option<Arc<CSINode>>,
    csinode_seen: bool,
    /// Failed CSINode reads in a row (when it is read, not watched).
    csinode_read: Retry<Arc<KubeApiError>>,
    who: Option<WhoAmI>,
    /// Asking who the credentials are: due at once at start and after new
    /// credentials, then retried with backoff until answered.
    identity: Retry<Arc<KubeApiError>>,
    last_success: Option<SystemTime>,
}

/// A retry record whose next attempt is due at once.
fn due_now() -> Retry<Arc<KubeApiError>> {
    let mut retry = Retry::default();
    retry.schedule(Instant::now(), Some(std::time::Duration::ZERO));
    retry
}

impl State {
    /// Nothing known of the server yet: every write is due, and who the
    /// credentials are is asked at once.
    fn new() -> Self {
        Self {
            node_status: WriteState::dirty_now(),
            owned_resources: BTreeSet::new(),
            csi_node: WriteState::dirty_now(),
            published_drivers: BTreeSet::new(),
            wipe_failures: Retry::default(),
            node: None,
            csinode: None,
            csinode_seen: false,
            csinode_read: Retry::default(),
            who: None,
            identity: due_now(),
            last_success: None,
        }
    }
}

impl Owner {
    pub(super) async fn run(mut self, shutdown: CancellationToken) -> Result<(), KubeApiError> {
        let mut state = State::new();
        let mut device_changes = self.devices.changes();
        let mut csi_changes = self.csi.changes();
        let mut work: JoinSet<Done> = JoinSet::new();
        let client = self.connection.borrow_and_update().client.clone();
        let mut node_watch = Some(
            NodeWatch::new(client.clone(), &self.config.node_name)
                .mirroring(self.node_mirror.take()),
        );
        let mut csinode =
            CsiNodeFollow::Watching(CsiNodeWatch::new(client, &self.config.node_name));
        let result = loop {
            let now = Instant::now();
            self.start_due(&mut state, &mut work, &mut csinode, now);
            self.publish_status(&state);
            let wake = [
                state.node_status.next_due(),
                state.csi_node.next_due(),
                state.identity.due_at(),
                match &csinode {
                    CsiNodeFollow::Reading { next } => *next,
                    CsiNodeFollow::Watching(_) => None,
                },
            ]
            .into_iter()
            .flatten()
            .min();
            let mut csinode_watch = match &mut csinode {
                CsiNodeFollow::Watching(watch) => Some(watch),
                CsiNodeFollow::Reading { .. } => None,
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break Ok(()),
                Some(done) = work.join_next(), if !work.is_empty() => {
                    let Ok(done) = done else { continue };
                    let done = match done {
                        Done::CsiNodeRead(Err(e)) => {
                            let e = Arc::new(e);
                            tracing::debug!(error = %e, "reading the CSINode failed");
                            self.csinode_read_done(&mut state, &mut csinode, Err(e), Instant::now());
                            continue;
                        }
                        Done::CsiNodeRead(Ok(found)) => {
                            self.csinode_read_done(&mut state, &mut csinode, Ok(()), Instant::now());
                            Done::CsiNodeRead(Ok(found))
                        }
                        other => other,
                    };
                    if let Err(fatal) = self.on_done(&mut state, done) {
                        break Err(fatal);
                    }
                }
                Ok(()) = device_changes.changed() => {
                    state.node_status.mark(Instant::now(), self.config.settle);
                }
                Ok(()) = csi_changes.changed() => {
                    state.csi_node.mark(Instant::now(), self.config.settle);
                }
                Ok(()) = self.connection.changed() => {
                    // New credentials: watch and write with them, and check
                    // who they are.
                    let client = self.connection.borrow_and_update().client.clone();
                    let mirror = node_watch.take().and_then(NodeWatch::into_mirror);
                    node_watch = Some(NodeWatch::new(client.clone(), &self.config.node_name).mirroring(mirror));
                    if matches!(csinode, CsiNodeFollow::Watching(_)) {
                        csinode = CsiNodeFollow::Watching(CsiNodeWatch::new(client, &self.config.node_name));
                    }
                    state.identity = due_now();
                    state.node_status.mark(Instant::now(), std::time::Duration::ZERO);
                    state.csi_node.mark(Instant::now(), std::time::Duration::ZERO);
                }
                seen = observed::next(&mut node_watch) => self.on_node(&mut state, &mut csinode, seen),
                seen = next_csinode(&mut csinode_watch) => {
                    self.on_csinode(&mut state, &mut csinode, seen);
                }
                Some(report) = self.wipes.recv() => self.on_wipe(&mut state, report),
                () = sleep_until(wake) => {}
            }
        };
        work.abort_all();
        result
    }

    /// Starts every write, read and check that is due.
    fn start_due(
        &self,
        state: &mut State,
        work: &mut JoinSet<Done>,
        csinode: &mut CsiNodeFollow,
        now: Instant,
    ) {
        let client = self.connection.borrow().client.clone();
        let node = self.config.node_name.clone();
        if state.identity.due_at().is_some_and(|at| at <= now) {
            state.identity.wake();
            let client = client.clone();
            work.spawn(async move { Done::Identity(identity::who_am_i(&client).await) });
        }
        if let CsiNodeFollow::Reading { next } = csinode
            && next.is_some_and(|at| at <= now)
        {
            *next = None;
            let (client, node) = (client.clone(), node.clone());
            work.spawn(async move {
                let csinodes: Api<CSINode> = Api::all(client);
                let read = request(|| format!("get csinode {node}"), csinodes.get_opt(&node));
                Done::CsiNodeRead(read.await.map(|found| found.map(Box::new)))
            });
        }
        if state.node_status.ready(now) {
            state.node_status.start();
            let devices = self.devices.clone();
            let owned = state.owned_resources.clone();
            let written = state.node_status.written.clone();
            let seen = state.node.clone();
            let (client, node) = (client.clone(), node.clone());
            work.spawn(async move {
                // The device manager's published snapshot, once it has read
                // its checkpoint: nothing asks its task.
                let Ok(snapshot) = devices.running_snapshot().await else {
                    return Done::NodeStatusUnchanged;
                };
                let resources = snapshot.status_at(Instant::now());
                let desired = node_status::desired(&resources, &owned);
                let shown = seen
                    .as_deref()
                    .is_none_or(|n| node_status::shows(n, &desired));
                if written.as_ref() == Some(&desired) && shown {
                    return Done::NodeStatusUnchanged;
                }
                let result = node_status::write(&client, &node, &desired)
                    .await
                    .map(Box::new);
                Done::NodeStatus { desired, result }
            });
        }
        if state.csi_node.ready(now) {
            state.csi_node.start();
            let desired = csi_node::desired(&self.csi.snapshot().drivers());
            let removed: BTreeSet<String> = state
                .published_drivers
                .iter()
                .filter(|d| !desired.contains_key(*d))
                .cloned()
                .collect();
            let shown = match (&state.node, state.csinode_seen) {
                (Some(n), true) => csi_node::shows(n, state.csinode.as_deref(), &desired, &removed),
                _ => true,
            };
            if state.csi_node.written.as_ref() == Some(&desired) && shown {
                state.csi_node.unchanged();
                return;
            }
            // Published before the write: whatever it leaves behind if it
            // fails is removed once the driver is gone.
            state.published_drivers.extend(desired.keys().cloned());
            work.spawn(async move {
                let result = csi_node::write(&client, &node, &desired, &removed)
                    .await
                    .map(Box::new);
                Done::CsiNode { desired, result }
            });
        }
    }

    fn on_done(&self, state: &mut State, done: Done) -> Result<(), KubeApiError> {
        let now = Instant::now();
        match done {
            Done::NodeStatusUnchanged => state.node_status.unchanged(),
            Done::NodeStatus { desired, result } => {
                if let Ok(node) = &result {
                    state.owned_resources.extend(desired.keys().cloned());
                    state.node = Some(Arc::new((**node).clone()));
                }
                let said =
                    state
                        .node_status
                        .finished(desired, result.map(|_| ()), now, &self.policy);
                let error = state.node_status.failures.last_error().cloned();
                self.finish(state, WriteKind::NodeStatus, said, error);
            }
            Done::CsiNode { desired, result } => {
                if let Ok(csinode) = &result {
                    state.published_drivers = desired.keys().cloned().collect();
                    // What the Node's next changes are checked against, when
                    // the CSINode is read rather than watched (unless a watch
                    // already showed a newer one).
                    let newer = state
                        .csinode
                        .as_deref()
                        .is_none_or(|known| version(csinode.as_ref()) >= version(known));
                    if newer {
                        state.csinode = Some(Arc::new((**csinode).clone()));
                        state.csinode_seen = true;
                    }
                }
                let said = state
                    .csi_node
                    .finished(desired, result.map(|_| ()), now, &self.policy);
                let error = state.csi_node.failures.last_error().cloned();
                self.finish(state, WriteKind::CsiNode, said, error);
            }
            Done::Identity(Ok(who)) => {
                state.identity.succeeded();
                identity::check(&who, &self.config.node_name)?;
                tracing::info!(user = %who.user, "the API server knows the agent as this user");
                state.who = Some(who);
            }
            Done::Identity(Err(e)) => {
                state
                    .identity
                    .failed(Arc::new(e), &self.policy.backoff, now);
                let retry_in = state.identity.retry_in(now);
                tracing::debug!(error = ?state.identity.last_error().map(ToString::to_string), ?retry_in, "who the API server takes the agent for is not known yet");
            }
            Done::CsiNodeRead(Ok(found)) => {
                state.csinode = found.map(|c| Arc::new(*c));
                state.csinode_seen = true;
                self.check_csi(state);
            }
            Done::CsiNodeRead(Err(e)) => {
                tracing::debug!(error = %e, "reading the CSINode failed");
            }
        }
        Ok(())
    }

    /// The Node changed (or is gone, or made again).
    fn on_node(&self, state: &mut State, csinode: &mut CsiNodeFollow, seen: Seen<Node>) {
        let node = match seen {
            Seen::Now(node) => node,
            Seen::Failed(e) => {
                tracing::debug!(error = %e, "watching the Node failed; watching again");
                return;
            }
        };
        // The newer of what was seen and what a write returned.
        let newer = match (&node, &state.node) {
            (Some(seen), Some(known)) => version(seen.as_ref()) >= version(known.as_ref()),
            _ => true,
        };
        if !newer {
            return;
        }
        if let Some(node) = &node {
            state.owned_resources.extend(node_status::owned(node));
        }
        // A Node seen for the first time, or made again (another UID).
        let uid = |n: &Option<Arc<Node>>| n.as_ref().and_then(|n| n.metadata.uid.clone());
        let made = uid(&node).is_some() && uid(&node) != uid(&state.node);
        state.node = node;
        if state.node.is_none() {
            // Deleted, or not made yet: nothing can be written until it is
            // (re-)created, and then everything is written again.
            tracing::info!(node = %self.config.node_name, "the Node does not exist; writing once it does");
            state.node_status.wait_for_object();
            state.csi_node.wait_for_object();
            return;
        }
        let now = Instant::now();
        state.node_status.object_exists(now);
        state.csi_node.object_exists(now);
        let shows_status = match (&state.node, &state.node_status.written) {
            (Some(node), Some(written)) => node_status::shows(node, written),
            _ => false,
        };
        if !shows_status {
            state.node_status.drifted(now);
        }
        match csinode {
            // Read the CSINode too when the Node is new: a Node made again
            // has its CSINode made again, or not. Another change of the
            // Node (the agent's own status writes among them) is checked
            // against the CSINode last read, which the periodic read
            // keeps current.
            CsiNodeFollow::Reading { next } if made => *next = Some(now),
            _ => self.check_csi(state),
        }
    }

    fn on_wipe(&self, state: &mut State, report: WipeReport) {
        let said = match report {
            Ok(()) => state.wipe_failures.succeeded(),
            Err(error) => state.wipe_failures.record(error),
        };
        let error = state.wipe_failures.last_error().cloned();
        self.finish(state, WriteKind::ResourceSlices, said, error);
    }

    /// Counts a finished write, and tells about it when there is news.
    /// `error`: why it failed, if it did.
    fn finish(
        &self,
        state: &mut State,
        kind: WriteKind,
        said: Said,
        error: Option<Arc<KubeApiError>>,
    ) {
        let ok = error.is_none();
        self.metrics.wrote(kind, ok);
        if ok {
            state.last_success = Some(SystemTime::now());
        }
        let (event, detail) = match (said, error) {
            (Said::NewError, Some(error)) => {
                tracing::warn!(write = %kind, %error, "Kubernetes API write failed; retrying");
                (EventKind::WriteFailed, Some(error.to_string()))
            }
            (Said::Quiet | Said::NewError, _) => return,
            (Said::Recovered, _) => {
                tracing::info!(write = %kind, "Kubernetes API has the latest state again");
                (EventKind::CaughtUp, None)
            }
        };
        let subject = EventSubject::Kube {
            write: kind.as_str().to_string(),
            detail,
        };
        let _ = self.events.send(AgentEvent::now(event, subject));
    }

    fn publish_status(&self, state: &State) {
        let mut pending = Vec::new();
        if state.node_status.pending() {
            pending.push(WriteKind::NodeStatus);
        }
        if state.csi_node.pending() {
            pending.push(WriteKind::CsiNode);
        }
        if state.wipe_failures.failing() {
            pending.push(WriteKind::ResourceSlices);
        }
        self.metrics.set_pending(pending.len());
        let last_error = [
            state.node_status.failures.last_error(),
            state.csi_node.failures.last_error(),
            state.wipe_failures.last_error(),
        ]
        .into_iter()
        .flatten()
        .next()
        .map(ToString::to_string);
        let status = KubeApiStatus {
            server: self.connection.borrow().server.clone(),
            node: self.config.node_name.clone(),
            user: state.who.as_ref().map(|w| w.user.clone()),
            last_success_unix_ms: state.last_success.map(unix_ms),
            pending,
            last_error,
            failures: state
                .node_status
                .failures
                .failures()
                .max(state.csi_node.failures.failures())
                .max(state.wipe_failures.failures()),
        };
        self.status.publish_if_changed(status);
    }
}

/// An object's resourceVersion as a number (0 when it has none).
fn version<K: kube::Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

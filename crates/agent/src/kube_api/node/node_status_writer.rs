//! The task that writes the device plugins' resources into the Node's
//! status: a change of the devices marks the write (after a short settle,
//! so a burst of changes is one write), one write runs at a time, a failed
//! one is retried as its error calls for ([`WriteState`]), and the Node as
//! its watch shows it is checked against what was written (a Node made
//! again, another writer, a lost write mark it again). Nothing is written
//! while nothing changes, and no caller waits for the API server.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::device::DeviceSnapshot;
use crate::kube_api::client::credentials::Connection;
use crate::kube_api::error::KubeApiError;
use crate::kube_api::node::node_status::{self, NodeStatusWant};
use crate::kube_api::node::volumes_in_use::VolumesInUse;
use crate::kube_api::observe::observed::{NodeSeen, newer};
use crate::kube_api::status::WriteKind;
use crate::kube_api::writes::report::{Reporter, Standing};
use crate::kube_api::writes::write_state::{RetryPolicy, WriteState};
use crate::published::Store;
use nodeplugins_api::timer::sleep_until;

/// How one write ended.
pub(in crate::kube_api) enum Ended {
    /// The server had the state already: nothing was sent.
    Unchanged,
    /// `desired` was sent; the Node as the write left it, or why it failed.
    Wrote {
        desired: NodeStatusWant,
        result: Result<Box<Node>, KubeApiError>,
    },
}

/// The node status write and what it knows of the server.
pub(in crate::kube_api) struct NodeStatusWriter {
    node_name: String,
    settle: Duration,
    policy: RetryPolicy,
    /// The device manager's published state.
    devices: Store<DeviceSnapshot>,
    reporter: Reporter,
    /// The volume manager's volumes in use.
    volumes_in_use: watch::Receiver<Option<BTreeSet<String>>>,
    pub(in crate::kube_api) write: WriteState<NodeStatusWant>,
    /// Every resource written by the agent, this run or before (from the
    /// Node's managed fields): written as 0 once it is gone.
    pub(in crate::kube_api) owned: BTreeSet<String>,
    /// The newer of the Node last seen and the one the last write
    /// returned (`None`: it does not exist, or not yet known).
    pub(in crate::kube_api) node: Option<Arc<Node>>,
}

impl NodeStatusWriter {
    /// Nothing known of the server yet: the write is due at once.
    pub(in crate::kube_api) fn new(
        node_name: String,
        settle: Duration,
        policy: RetryPolicy,
        devices: Store<DeviceSnapshot>,
        volumes_in_use: &VolumesInUse,
        reporter: Reporter,
    ) -> Self {
        Self {
            node_name,
            settle,
            policy,
            devices,
            volumes_in_use: volumes_in_use.subscribe(),
            reporter,
            write: WriteState::dirty_now(),
            owned: BTreeSet::new(),
            node: None,
        }
    }

    /// Writes until `shutdown`: a change of the devices, of the volumes in
    /// use, of the Node (`node`) or of the credentials (`connection`) is
    /// the trigger.
    pub(in crate::kube_api) async fn run(
        mut self,
        mut connection: watch::Receiver<Connection>,
        mut node: watch::Receiver<NodeSeen>,
        shutdown: CancellationToken,
    ) {
        let mut device_changes = self.devices.changes();
        let mut in_use_changes = self.volumes_in_use.clone();
        let mut work: JoinSet<Ended> = JoinSet::new();
        loop {
            if let Some(write) = self.start_due(&connection.borrow().client, Instant::now()) {
                work.spawn(write);
            }
            self.report();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(ended) = work.join_next(), if !work.is_empty() => match ended {
                    Ok(ended) => self.on_end(ended),
                    Err(e) => self.on_lost(&e),
                },
                Ok(()) = device_changes.changed() => self.write.mark(Instant::now(), self.settle),
                Ok(()) = in_use_changes.changed() => self.write.mark(Instant::now(), self.settle),
                Ok(()) = node.changed() => {
                    let seen = node.borrow_and_update().clone();
                    self.on_node(seen);
                }
                Ok(()) = connection.changed() => {
                    // New credentials: write with them at once.
                    connection.borrow_and_update();
                    self.write.mark(Instant::now(), Duration::ZERO);
                }
                () = sleep_until(self.write.next_due()) => {}
            }
        }
        work.abort_all();
    }

    /// The write, when one is due.
    fn start_due(
        &mut self,
        client: &kube::Client,
        now: Instant,
    ) -> Option<impl Future<Output = Ended> + Send + 'static> {
        if !self.write.ready(now) {
            return None;
        }
        self.write.start();
        let devices = self.devices.clone();
        let owned = self.owned.clone();
        let written = self.write.written.clone();
        let seen = self.node.clone();
        let volumes_in_use = self
            .volumes_in_use
            .borrow()
            .as_ref()
            .map(|names| names.iter().cloned().collect::<Vec<_>>());
        let (client, node) = (client.clone(), self.node_name.clone());
        Some(async move {
            // The device manager's published snapshot, once it has read
            // its checkpoint: nothing asks its task.
            let Ok(snapshot) = devices.wait_until_ready().await else {
                return Ended::Unchanged;
            };
            let resources = snapshot.status_at(Instant::now());
            let desired = NodeStatusWant {
                resources: node_status::desired(&resources, &owned),
                volumes_in_use,
            };
            let shown = seen
                .as_deref()
                .is_none_or(|n| node_status::shows(n, &desired));
            if written.as_ref() == Some(&desired) && shown {
                return Ended::Unchanged;
            }
            let result = node_status::write(&client, &node, &desired, seen.as_deref())
                .await
                .map(Box::new);
            Ended::Wrote { desired, result }
        })
    }

    /// A write ended.
    pub(in crate::kube_api) fn on_end(&mut self, ended: Ended) {
        match ended {
            Ended::Unchanged => self.write.unchanged(),
            Ended::Wrote { desired, result } => {
                if let Ok(node) = &result {
                    self.owned.extend(desired.resources.keys().cloned());
                    self.node = Some(Arc::new((**node).clone()));
                }
                let said =
                    self.write
                        .finished(desired, result.map(|_| ()), Instant::now(), &self.policy);
                let error = self.write.failures.last_error().cloned();
                self.reporter.finished(WriteKind::NodeStatus, said, error);
            }
        }
    }

    /// A write's task ended without an answer (it panicked): the state is
    /// written again after a settle, as after a change.
    fn on_lost(&mut self, error: &tokio::task::JoinError) {
        tracing::warn!(%error, "the node status write ended without an answer; writing again");
        self.write.unchanged();
        self.write.mark(Instant::now(), self.settle);
    }

    /// The Node changed (or is gone, or made again).
    pub(in crate::kube_api) fn on_node(&mut self, seen: NodeSeen) {
        let NodeSeen::Now(node) = seen else {
            return;
        };
        if !newer(node.as_deref(), self.node.as_deref()) {
            return;
        }
        if let Some(node) = &node {
            self.owned.extend(node_status::owned(node));
        }
        self.node = node;
        let Some(node) = &self.node else {
            // Deleted, or not made yet: nothing can be written until it is
            // (re-)created, and then everything is written again.
            tracing::info!(node = %self.node_name, "the Node does not exist; writing once it does");
            self.write.wait_for_object();
            return;
        };
        let now = Instant::now();
        let shows = self
            .write
            .written
            .as_ref()
            .is_some_and(|written| node_status::shows(node, written));
        self.write.object_exists(now);
        if !shows {
            self.write.drifted(now);
        }
    }

    fn report(&self) {
        self.reporter
            .stands(WriteKind::NodeStatus, Standing::of_write(&self.write));
    }
}

#[cfg(test)]
pub(in crate::kube_api) mod tests {
    //! The writer's transitions, fed the ends of writes and the Node as
    //! its watch would show it, without an API server.

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodeplugins_api::backoff::Backoff;
    use tokio::sync::broadcast;

    use super::*;
    use crate::device::{DeviceManager, DeviceManagerConfig};
    use crate::event::{AgentEvent, EventKind};
    use crate::kube_api::observe::observed::version;
    use crate::kube_api::writes::repair_limit::RepairLimit;

    pub(in crate::kube_api) const NODE: &str = "node-1";
    pub(in crate::kube_api) const POLICY: RetryPolicy = RetryPolicy {
        backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
        slowly: Backoff::new(Duration::from_secs(10), Duration::from_secs(300)),
    };

    fn writer() -> (NodeStatusWriter, broadcast::Receiver<AgentEvent>) {
        let (reporter, events) = Reporter::detached(NODE);
        let (_, devices) = DeviceManager::new(DeviceManagerConfig::new("/nonexistent"));
        let writer = NodeStatusWriter::new(
            NODE.into(),
            Duration::ZERO,
            POLICY,
            devices.store(),
            &VolumesInUse::new(),
            reporter,
        );
        (writer, events)
    }

    pub(in crate::kube_api) fn answered(code: u16) -> KubeApiError {
        KubeApiError::Request {
            what: format!("apply node {NODE} status"),
            source: kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            })),
        }
    }

    /// The Node at `version`, made with UID `uid`.
    pub(in crate::kube_api) fn made_node(version: u64, uid: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(NODE.into()),
                uid: Some(uid.into()),
                resource_version: Some(version.to_string()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn node(version: u64) -> Node {
        made_node(version, "uid-1")
    }

    fn seen(node: Node) -> NodeSeen {
        NodeSeen::Now(Some(Arc::new(node)))
    }

    fn resources() -> NodeStatusWant {
        NodeStatusWant {
            resources: [("example.com/gpu".to_string(), (2, 2))].into(),
            volumes_in_use: None,
        }
    }

    /// A write starts and ends with `result`.
    fn write_ends(w: &mut NodeStatusWriter, result: Result<Node, KubeApiError>) {
        w.write.start();
        w.on_end(Ended::Wrote {
            desired: resources(),
            result: result.map(Box::new),
        });
        w.report();
    }

    #[tokio::test]
    async fn a_failed_write_shows_in_status_is_said_once_and_a_success_catches_up() {
        let (mut w, mut events) = writer();
        let before = Instant::now();
        write_ends(&mut w, Err(answered(503)));
        let status = w.reporter.status();
        assert!(status.pending.contains(&WriteKind::NodeStatus));
        assert_eq!(status.failures, 1);
        assert!(status.last_error.as_deref().unwrap().contains("apply node"));
        let due = w.write.next_due().unwrap();
        assert!(
            due >= before + POLICY.backoff.delay(1),
            "retried after the backoff"
        );
        assert_eq!(w.reporter.publications(), 1);

        write_ends(&mut w, Err(answered(503)));
        assert_eq!(w.reporter.status().failures, 2);
        assert_eq!(
            Reporter::kinds(&mut events),
            vec![EventKind::WriteFailed],
            "said once"
        );

        write_ends(&mut w, Ok(node(7)));
        let status = w.reporter.status();
        assert!(!status.pending.contains(&WriteKind::NodeStatus));
        assert_eq!((status.failures, status.last_error.clone()), (0, None));
        assert!(status.last_success_unix_ms.is_some());
        assert_eq!(Reporter::kinds(&mut events), vec![EventKind::CaughtUp]);
        assert_eq!(w.write.next_due(), None, "nothing more to write");
        assert!(w.owned.contains("example.com/gpu"));
    }

    #[tokio::test]
    async fn a_deleted_node_holds_the_write_until_it_is_made_again() {
        let (mut w, _events) = writer();
        write_ends(&mut w, Ok(node(5)));
        assert_eq!(w.write.next_due(), None);

        w.on_node(NodeSeen::Now(None));
        assert!(w.node.is_none());
        w.write.mark(Instant::now(), Duration::ZERO);
        assert_eq!(w.write.next_due(), None, "nothing to write to");

        let made_again = Instant::now();
        w.on_node(seen(made_node(9, "uid-2")));
        let due = w.write.next_due().unwrap();
        assert!(due >= made_again && w.write.ready(Instant::now()));
    }

    #[tokio::test]
    async fn a_node_older_than_what_a_write_returned_changes_nothing() {
        let (mut w, _events) = writer();
        write_ends(&mut w, Ok(node(10)));
        w.on_node(seen(node(9)));
        assert_eq!(version(w.node.as_deref().unwrap()), 10);
        assert_eq!(w.write.next_due(), None);
    }

    #[tokio::test]
    async fn a_node_not_listed_yet_changes_nothing() {
        let (mut w, _events) = writer();
        write_ends(&mut w, Ok(node(3)));
        w.on_node(NodeSeen::NotYet);
        assert_eq!(version(w.node.as_deref().unwrap()), 3);
        assert_eq!(w.write.next_due(), None);
    }

    #[tokio::test]
    async fn a_writer_that_keeps_undoing_the_status_draws_a_few_repairs_then_one_per_period() {
        let (mut w, _events) = writer();
        let mut waits = Vec::new();
        for round in 0..7 {
            // The agent's write lands; another writer undoes it at once.
            write_ends(&mut w, Ok(node(2 * round + 1)));
            let undone_at = Instant::now();
            w.on_node(seen(node(2 * round + 2)));
            let due = w.write.next_due().expect("repaired");
            waits.push(due.saturating_duration_since(undone_at));
        }
        let at_once = waits
            .iter()
            .filter(|w| **w < Duration::from_secs(1))
            .count();
        assert_eq!(at_once, 5, "the burst goes at once: {waits:?}");
        assert!(
            waits[5] >= RepairLimit::EVERY - Duration::from_secs(1),
            "then one repair per period: {waits:?}"
        );
    }
}

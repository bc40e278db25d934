//! The task that writes the node's CSI drivers: the Node's annotation and
//! labels and its CSINode. A change of the drivers marks the write (after
//! a short settle), one write runs at a time, a failed one is retried as
//! its error calls for ([`WriteState`]), and the Node and CSINode as the
//! server has them are checked against what was written.
//!
//! The CSINode is watched when the identity may watch it; else (a node's
//! own identity may only `get` it) it is read when the Node is made again
//! and every `csinode_recheck` of the configuration (up to a fifth longer
//! at random, so that the nodes of a cluster do not read in step; a failed
//! read again with backoff).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::csi::CsiDriverStore;
use crate::kube_api::client::credentials::Connection;
use crate::kube_api::csi::csi_node::{self, CsiDrivers};
use crate::kube_api::error::{KubeApiError, request};
use crate::kube_api::observe::observed::{
    self, CsiNodeFollow, CsiNodeWatch, NodeSeen, Seen, newer, next_csinode,
};
use crate::kube_api::status::WriteKind;
use crate::kube_api::writes::report::{Reporter, Standing};
use crate::kube_api::writes::write_state::{RetryPolicy, WriteState};
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::Retry;
use nodeplugins_api::timer::sleep_until;

/// Up to this fraction of the recheck period is added at random to each
/// CSINode read, so that the nodes of a cluster do not read in step.
const RECHECK_JITTER: f64 = 0.2;

/// The end of one piece of work done outside the task.
pub(in crate::kube_api) enum Ended {
    /// `desired` was written; the CSINode as the write left it, or why it
    /// failed.
    Wrote {
        desired: CsiDrivers,
        result: Result<Box<CSINode>, KubeApiError>,
    },
    /// The CSINode was read (`None`: it does not exist).
    Read(Result<Option<Box<CSINode>>, KubeApiError>),
}

/// The CSI write and what it knows of the server.
pub(in crate::kube_api) struct CsiNodeWriter {
    node_name: String,
    settle: Duration,
    recheck: Duration,
    policy: RetryPolicy,
    csi: CsiDriverStore,
    reporter: Reporter,
    pub(in crate::kube_api) write: WriteState<CsiDrivers>,
    /// Every CSI driver a write was started for: removed once it is gone,
    /// whatever a failed write may have left.
    published: BTreeSet<String>,
    /// The Node as last seen (`None`: it does not exist, or not yet known).
    pub(in crate::kube_api) node: Option<Arc<Node>>,
    csinode: Option<Arc<CSINode>>,
    csinode_seen: bool,
    /// Failed CSINode reads in a row (when it is read, not watched).
    pub(in crate::kube_api) read_failures: Retry<Arc<KubeApiError>>,
}

impl CsiNodeWriter {
    /// Nothing known of the server yet: the write is due at once.
    pub(in crate::kube_api) fn new(
        node_name: String,
        settle: Duration,
        recheck: Duration,
        policy: RetryPolicy,
        csi: CsiDriverStore,
        reporter: Reporter,
    ) -> Self {
        Self {
            node_name,
            settle,
            recheck,
            policy,
            csi,
            reporter,
            write: WriteState::dirty_now(),
            published: BTreeSet::new(),
            node: None,
            csinode: None,
            csinode_seen: false,
            read_failures: Retry::default(),
        }
    }

    /// Writes until `shutdown`: a change of the drivers, of the Node
    /// (`node`), of the CSINode or of the credentials (`connection`) is the
    /// trigger.
    pub(in crate::kube_api) async fn run(
        mut self,
        mut connection: watch::Receiver<Connection>,
        mut node: watch::Receiver<NodeSeen>,
        shutdown: CancellationToken,
    ) {
        let mut csi_changes = self.csi.changes();
        let mut work: JoinSet<Ended> = JoinSet::new();
        let client = connection.borrow_and_update().client.clone();
        let mut follow = CsiNodeFollow::Watching(CsiNodeWatch::new(client, &self.node_name));
        loop {
            let client = connection.borrow().client.clone();
            self.start_due(&client, &mut work, &mut follow, Instant::now());
            self.report();
            let wake = [
                self.write.next_due(),
                match &follow {
                    CsiNodeFollow::Reading { next } => *next,
                    CsiNodeFollow::Watching(_) => None,
                },
            ]
            .into_iter()
            .flatten()
            .min();
            let mut watching = match &mut follow {
                CsiNodeFollow::Watching(watch) => Some(watch),
                CsiNodeFollow::Reading { .. } => None,
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(ended) = work.join_next(), if !work.is_empty() => match ended {
                    Ok(ended) => self.on_end(&mut follow, ended),
                    Err(error) => {
                        tracing::warn!(%error, "a CSI write or read ended without an answer; writing again");
                        self.write.unchanged();
                        self.write.mark(Instant::now(), self.settle);
                    }
                },
                Ok(()) = csi_changes.changed() => self.write.mark(Instant::now(), self.settle),
                Ok(()) = node.changed() => {
                    let seen = node.borrow_and_update().clone();
                    self.on_node(&mut follow, seen);
                }
                seen = next_csinode(&mut watching) => self.on_csinode(&mut follow, seen),
                Ok(()) = connection.changed() => {
                    // New credentials: watch and write with them.
                    let client = connection.borrow_and_update().client.clone();
                    if matches!(follow, CsiNodeFollow::Watching(_)) {
                        follow = CsiNodeFollow::Watching(CsiNodeWatch::new(client, &self.node_name));
                    }
                    self.write.mark(Instant::now(), Duration::ZERO);
                }
                () = sleep_until(wake) => {}
            }
        }
        work.abort_all();
    }

    /// Starts the read and the write when they are due.
    fn start_due(
        &mut self,
        client: &kube::Client,
        work: &mut JoinSet<Ended>,
        follow: &mut CsiNodeFollow,
        now: Instant,
    ) {
        let node = self.node_name.clone();
        if let CsiNodeFollow::Reading { next } = follow
            && next.is_some_and(|at| at <= now)
        {
            *next = None;
            let (client, node) = (client.clone(), node.clone());
            work.spawn(async move {
                let csinodes: Api<CSINode> = Api::all(client);
                let read = request(|| format!("get csinode {node}"), csinodes.get_opt(&node));
                Ended::Read(read.await.map(|found| found.map(Box::new)))
            });
        }
        if !self.write.ready(now) {
            return;
        }
        self.write.start();
        let desired = csi_node::desired(&self.csi.snapshot().drivers());
        let removed = self.removed_beside(&desired);
        let shown = match (&self.node, self.csinode_seen) {
            (Some(n), true) => csi_node::shows(n, self.csinode.as_deref(), &desired, &removed),
            _ => true,
        };
        if self.write.written.as_ref() == Some(&desired) && shown {
            self.write.unchanged();
            return;
        }
        // Published before the write: whatever it leaves behind if it
        // fails is removed once the driver is gone.
        self.published.extend(desired.keys().cloned());
        let client = client.clone();
        work.spawn(async move {
            let result = csi_node::write(&client, &node, &desired, &removed)
                .await
                .map(Box::new);
            Ended::Wrote { desired, result }
        });
    }

    /// The drivers published once and not in `drivers`.
    fn removed_beside(&self, drivers: &CsiDrivers) -> BTreeSet<String> {
        self.published
            .iter()
            .filter(|d| !drivers.contains_key(*d))
            .cloned()
            .collect()
    }

    /// A write or a read ended.
    pub(in crate::kube_api) fn on_end(&mut self, follow: &mut CsiNodeFollow, ended: Ended) {
        let now = Instant::now();
        match ended {
            Ended::Wrote { desired, result } => {
                if let Ok(csinode) = &result {
                    self.published = desired.keys().cloned().collect();
                    // What the Node's next changes are checked against, when
                    // the CSINode is read rather than watched (unless a watch
                    // already showed a newer one).
                    if newer(Some(csinode.as_ref()), self.csinode.as_deref()) {
                        self.csinode = Some(Arc::new((**csinode).clone()));
                        self.csinode_seen = true;
                    }
                }
                let said = self
                    .write
                    .finished(desired, result.map(|_| ()), now, &self.policy);
                let error = self.write.failures.last_error().cloned();
                self.reporter.finished(WriteKind::CsiNode, said, error);
            }
            Ended::Read(Err(e)) => {
                let e = Arc::new(e);
                tracing::debug!(error = %e, "reading the CSINode failed");
                self.read_done(follow, Err(e), now);
            }
            Ended::Read(Ok(found)) => {
                self.read_done(follow, Ok(()), now);
                self.csinode = found.map(|c| Arc::new(*c));
                self.csinode_seen = true;
                self.check(now);
            }
        }
    }

    /// The Node changed (or is gone, or made again).
    pub(in crate::kube_api) fn on_node(&mut self, follow: &mut CsiNodeFollow, seen: NodeSeen) {
        let NodeSeen::Now(node) = seen else {
            return;
        };
        if !newer(node.as_deref(), self.node.as_deref()) {
            return;
        }
        // A Node seen for the first time, or made again (another UID).
        let uid = |n: &Option<Arc<Node>>| n.as_ref().and_then(|n| n.metadata.uid.clone());
        let made = uid(&node).is_some() && uid(&node) != uid(&self.node);
        self.node = node;
        if self.node.is_none() {
            // Nothing can be written until it is (re-)created, and then
            // everything is written again.
            self.write.wait_for_object();
            return;
        }
        let now = Instant::now();
        self.write.object_exists(now);
        match follow {
            // Read the CSINode too when the Node is new: a Node made again
            // has its CSINode made again, or not. Another change of the
            // Node (the agent's own status writes among them) is checked
            // against the CSINode last read, which the periodic read
            // keeps current.
            CsiNodeFollow::Reading { next } if made => *next = Some(now),
            _ => self.check(now),
        }
    }

    /// The CSINode's watch saw a change, or failed.
    pub(in crate::kube_api) fn on_csinode(
        &mut self,
        follow: &mut CsiNodeFollow,
        seen: Seen<CSINode>,
    ) {
        match seen {
            Seen::Now(csinode) => {
                self.csinode = csinode;
                self.csinode_seen = true;
                self.check(Instant::now());
            }
            Seen::Failed(e) if observed::refused(&e) => {
                tracing::info!(
                    "the CSINode may not be watched with these credentials; reading it when the Node changes and every {:?}",
                    self.recheck
                );
                *follow = CsiNodeFollow::Reading {
                    next: Some(Instant::now()),
                };
            }
            Seen::Failed(e) => {
                tracing::debug!(error = %e, "watching the CSINode failed; watching again")
            }
        }
    }

    /// A read of the CSINode finished: the next one in `recheck` (up to a
    /// fifth longer at random), or after a failure with the usual backoff;
    /// sooner if the Node is made again meanwhile.
    pub(in crate::kube_api) fn read_done(
        &mut self,
        follow: &mut CsiNodeFollow,
        read: Result<(), Arc<KubeApiError>>,
        now: Instant,
    ) {
        let CsiNodeFollow::Reading { next } = follow else {
            return;
        };
        if next.is_some() {
            // Already due again: the Node changed while it was read.
            return;
        }
        let delay = if let Err(error) = read {
            self.read_failures.record(error);
            self.policy.backoff.delay(self.read_failures.failures())
        } else {
            self.read_failures.succeeded();
            Backoff::new(self.recheck, self.recheck)
                .with_jitter(RECHECK_JITTER)
                .delay(1)
        };
        *next = Some(now + delay);
    }

    /// Marks the write when the Node and CSINode do not show what was
    /// written.
    fn check(&mut self, now: Instant) {
        let Some(node) = &self.node else {
            return;
        };
        let shown = match &self.write.written {
            Some(written) => csi_node::shows(
                node,
                self.csinode.as_deref(),
                written,
                &self.removed_beside(written),
            ),
            None => false,
        };
        if !shown {
            self.write.drifted(now);
        }
    }

    fn report(&self) {
        self.reporter
            .stands(WriteKind::CsiNode, Standing::of_write(&self.write));
    }
}

#[cfg(test)]
mod tests {
    //! The writer's transitions, fed the Node as its watch would show it
    //! and the ends of CSINode reads, without an API server.

    use super::*;
    use crate::kube_api::node::node_status_writer::tests::{NODE, POLICY, answered, made_node};

    fn writer() -> CsiNodeWriter {
        let (reporter, _) = Reporter::detached(NODE);
        CsiNodeWriter::new(
            NODE.into(),
            Duration::ZERO,
            crate::kube_api::CSINODE_RECHECK,
            POLICY,
            CsiDriverStore::default(),
            reporter,
        )
    }

    fn seen(version: u64, uid: &str) -> NodeSeen {
        NodeSeen::Now(Some(Arc::new(made_node(version, uid))))
    }

    #[tokio::test]
    async fn a_node_made_again_has_its_csinode_read_again_and_a_change_does_not() {
        let mut w = writer();
        let mut follow = CsiNodeFollow::Reading { next: None };
        w.on_node(&mut follow, seen(5, "uid-1"));
        assert!(matches!(follow, CsiNodeFollow::Reading { next: Some(_) }));

        w.on_node(&mut follow, NodeSeen::Now(None));
        w.write.mark(Instant::now(), Duration::ZERO);
        assert_eq!(w.write.next_due(), None, "nothing to write to");

        let mut follow = CsiNodeFollow::Reading { next: None };
        let made_again = Instant::now();
        w.on_node(&mut follow, seen(9, "uid-2"));
        assert!(
            matches!(follow, CsiNodeFollow::Reading { next: Some(_) }),
            "the CSINode is read again with the Node"
        );
        assert!(w.write.next_due().unwrap() >= made_again);

        // The Node changes again (the agent's own status write): the CSINode
        // last read stands.
        let mut follow = CsiNodeFollow::Reading { next: None };
        w.on_node(&mut follow, seen(10, "uid-2"));
        assert!(matches!(follow, CsiNodeFollow::Reading { next: None }));
    }

    #[tokio::test]
    async fn a_csinode_read_comes_again_within_the_recheck_period_and_a_failed_one_sooner() {
        let mut w = writer();
        let now = Instant::now();
        let mut follow = CsiNodeFollow::Reading { next: None };
        w.read_done(&mut follow, Ok(()), now);
        let CsiNodeFollow::Reading { next: Some(next) } = follow else {
            panic!("a read is due again");
        };
        let recheck = crate::kube_api::CSINODE_RECHECK;
        let after = next.saturating_duration_since(now);
        assert!(
            after >= recheck && after <= recheck.mul_f64(1.2),
            "{after:?}"
        );

        let mut follow = CsiNodeFollow::Reading { next: None };
        w.read_done(&mut follow, Err(Arc::new(answered(503))), now);
        let CsiNodeFollow::Reading { next: Some(next) } = follow else {
            panic!("a failed read is asked again");
        };
        assert!(next.saturating_duration_since(now) < Duration::from_secs(5));
        assert_eq!(w.read_failures.failures(), 1);

        // Due again already (the Node changed meanwhile): left as it is.
        let mut follow = CsiNodeFollow::Reading { next: Some(now) };
        w.read_done(&mut follow, Ok(()), now);
        assert!(matches!(follow, CsiNodeFollow::Reading { next: Some(at) } if at == now));
    }
}

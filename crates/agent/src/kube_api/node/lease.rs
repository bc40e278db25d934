//! The node's heartbeat: its Lease (`coordination.k8s.io/v1`, in
//! `kube-node-lease`, named like the node) renewed as the kubelet's lease
//! controller renews it, so that the node lifecycle controller keeps the
//! node healthy between status writes.
//!
//! - `holderIdentity` is the node's name, `leaseDurationSeconds` the
//!   configured duration (the kubelet's `nodeLeaseDurationSeconds`, 40),
//!   `renewTime` now at each renewal; the Lease is owned by the Node (an
//!   owner reference with the Node's UID, added once the Node is seen), so
//!   the garbage collector removes it with its Node.
//! - A renewal every quarter of the duration (10 s), up to 4% later at
//!   random, counted from the end of the last one.
//! - A renewal updates the Lease it last wrote, without reading it first
//!   (up to five tries; a conflict reads it again); failing that, the
//!   Lease is read, made when it is not there, and updated, retried 200 ms
//!   doubling to 7 s until it is.
//! - The Lease is never deleted: not at start, not at exit.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::timer::sleep_until;
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kube_api::client::credentials::Connection;
use crate::kube_api::observe::observed::NodeSeen;

/// The namespace of the nodes' Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// A renewal is due after this fraction of the duration.
const RENEW_FRACTION: f64 = 0.25;
/// ...up to this fraction of it later, at random.
const RENEW_JITTER: f64 = 0.04;
/// Updates of the last Lease written, before it is read again.
const UPDATE_TRIES: usize = 5;
/// The retries of reading or making the Lease.
const ENSURE_BACKOFF: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(7));

/// The node's Lease, renewed.
pub(in crate::kube_api) struct NodeLease {
    node_name: String,
    duration: Duration,
    /// The Lease as the last write left it.
    latest: Option<Lease>,
}

impl NodeLease {
    /// The Lease of node `node_name`, held for `duration`.
    pub(in crate::kube_api) fn new(node_name: String, duration: Duration) -> Self {
        Self {
            node_name,
            duration,
            latest: None,
        }
    }

    /// Renews the Lease through the current client until `stop`, owned by
    /// the Node as `seen` shows it.
    pub(in crate::kube_api) async fn run(
        mut self,
        connection: watch::Receiver<Connection>,
        seen: watch::Receiver<NodeSeen>,
        stop: CancellationToken,
    ) {
        let interval = self.duration.mul_f64(RENEW_FRACTION);
        loop {
            let api: Api<Lease> =
                Api::namespaced(connection.borrow().client.clone(), NODE_LEASE_NAMESPACE);
            let renewed = self.sync(&api, &seen, &stop);
            tokio::select! {
                () = stop.cancelled() => return,
                () = renewed => {}
            }
            let jitter = interval.mul_f64(rand::rng().random_range(0.0..RENEW_JITTER));
            tokio::select! {
                () = stop.cancelled() => return,
                () = sleep_until(Some(Instant::now() + interval + jitter)) => {}
            }
        }
    }

    /// One renewal: the last Lease updated, or else the Lease read (made
    /// when it is not there) and updated.
    async fn sync(
        &mut self,
        api: &Api<Lease>,
        seen: &watch::Receiver<NodeSeen>,
        stop: &CancellationToken,
    ) {
        if let Some(latest) = self.latest.clone() {
            match self.update(api, latest, seen, stop).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::info!(node = %self.node_name, %error, "failed to update the node's Lease from the last one written; reading it again");
                }
            }
        }
        let (lease, created) = self.ensure(api, seen, stop).await;
        self.latest = Some(lease.clone());
        if !created && let Err(error) = self.update(api, lease, seen, stop).await {
            tracing::warn!(node = %self.node_name, %error, "failed to renew the node's Lease");
        }
    }

    /// `base` renewed, up to [`UPDATE_TRIES`] times; a conflict reads the
    /// Lease again.
    async fn update(
        &mut self,
        api: &Api<Lease>,
        mut base: Lease,
        seen: &watch::Receiver<NodeSeen>,
        stop: &CancellationToken,
    ) -> Result<(), kube::Error> {
        let mut last = None;
        for _ in 0..UPDATE_TRIES {
            let lease = self.renewed(Some(base.clone()), seen);
            match api
                .replace(&self.node_name, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    self.latest = Some(written);
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    last = Some(kube::Error::Api(status));
                    base = self.ensure(api, seen, stop).await.0;
                }
                Err(error) => last = Some(error),
            }
        }
        Err(last
            .unwrap_or_else(|| kube::Error::Service("the node's Lease was never written".into())))
    }

    /// The Lease as the server has it, made when it is not there (`true`:
    /// made now), retried on [`ENSURE_BACKOFF`] until one of the two works
    /// (or `stop`: the last Lease known, or a new one).
    async fn ensure(
        &self,
        api: &Api<Lease>,
        seen: &watch::Receiver<NodeSeen>,
        stop: &CancellationToken,
    ) -> (Lease, bool) {
        let mut failures = 0u32;
        loop {
            let attempt = match api.get_opt(&self.node_name).await {
                Ok(Some(lease)) => return (lease, false),
                Ok(None) => api
                    .create(&PostParams::default(), &self.renewed(None, seen))
                    .await
                    .map(|lease| (lease, true)),
                Err(error) => Err(error),
            };
            match attempt {
                Ok(made) => return made,
                Err(error) => {
                    if failures == 0 {
                        tracing::warn!(node = %self.node_name, %error, "failed to read or make the node's Lease; trying again with backoff");
                    }
                    failures = failures.saturating_add(1);
                    let delay = ENSURE_BACKOFF.delay(failures);
                    tokio::select! {
                        () = stop.cancelled() => {
                            return (self.latest.clone().unwrap_or_else(|| self.renewed(None, seen)), false);
                        }
                        () = sleep_until(Some(Instant::now() + delay)) => {}
                    }
                }
            }
        }
    }

    /// `base` (or a new Lease) renewed now, owned by the Node when it has
    /// no owner yet and the Node is seen.
    fn renewed(&self, base: Option<Lease>, seen: &watch::Receiver<NodeSeen>) -> Lease {
        let mut lease = base.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.node_name.clone()),
                lease_duration_seconds: i32::try_from(self.duration.as_secs()).ok(),
                ..LeaseSpec::default()
            }),
        });
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        if lease
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty)
            && let NodeSeen::Now(Some(node)) = &*seen.borrow()
            && let Some(uid) = node.metadata.uid.clone()
        {
            lease.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: self.node_name.clone(),
                uid,
                ..OwnerReference::default()
            }]);
        }
        lease
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Node;

    use super::*;

    #[test]
    fn a_new_lease_is_the_kubelets_and_owned_by_the_node_once_seen() {
        let lease = NodeLease::new("n1".into(), crate::kube_api::NODE_LEASE_DURATION);
        let (tell, seen) = watch::channel(NodeSeen::NotYet);
        let first = lease.renewed(None, &seen);
        assert_eq!(first.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let spec = first.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.renew_time.is_some());
        assert!(
            first.metadata.owner_references.is_none(),
            "no Node seen yet"
        );
        let mut node = Node::default();
        node.metadata.uid = Some("uid-1".into());
        tell.send_replace(NodeSeen::Now(Some(Arc::new(node))));
        let owned = lease.renewed(Some(first), &seen);
        let owner = &owned.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("v1", "Node", "n1", "uid-1")
        );
        assert_eq!(owner.controller, None);
    }
}

//! The agent's own Node and CSINode as the API server has them, watched by
//! name (`metadata.name=<node>`), so that what the agent wrote is checked
//! against what is there: a Node deleted and made again, another writer's
//! change, a lost write are all seen and repaired.
//!
//! A node's own identity may watch its Node but only read its CSINode (the
//! Node authorizer allows `get`, not `watch`): when the CSINode watch is
//! refused, the CSINode is read instead whenever the Node changes and every
//! [`CSINODE_RECHECK`]. Each watch follows the current client: when the
//! credentials change, it starts again with the new one.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kube_api::client::credentials::Connection;
use crate::kube_api::observe::reflected::Watched;

/// A change of one watched object.
#[derive(Debug)]
pub(crate) enum Seen<K> {
    /// It is as given (`None`: it does not exist), after a listing or a
    /// change.
    Now(Option<Arc<K>>),
    /// The watch failed; it starts again by itself.
    Failed(watcher::Error),
}

/// A watch of one object by name.
pub(crate) struct Watch<K>
where
    K: Watched,
{
    events: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    /// What the listing in progress found.
    listing: Option<Arc<K>>,
    /// A store kept current with what this watch sees, for other readers
    /// of the object (the node's pods read its Node there): one watch
    /// serves both.
    mirror: Option<Writer<K>>,
}

impl<K> Watch<K>
where
    K: Watched,
{
    /// Watches the cluster-scoped object `name` through `client`.
    pub(crate) fn new(client: kube::Client, name: &str) -> Self {
        let api: Api<K> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        Self {
            events: watcher(api, config).default_backoff().boxed(),
            listing: None,
            mirror: None,
        }
    }

    /// Keeps `mirror`'s store current with what this watch sees.
    pub(crate) fn mirroring(mut self, mirror: Option<Writer<K>>) -> Self {
        self.mirror = mirror;
        self
    }

    /// The mirror's writer, for the watch that replaces this one (its
    /// store keeps what it has until the new listing replaces it whole).
    pub(crate) fn into_mirror(self) -> Option<Writer<K>> {
        self.mirror
    }

    /// The next change of the object.
    pub(crate) async fn next(&mut self) -> Seen<K> {
        loop {
            let event = match self.events.next().await {
                Some(event) => event,
                // A watcher's stream does not end; if it did, nothing more
                // is seen.
                None => std::future::pending().await,
            };
            if let (Ok(event), Some(mirror)) = (&event, self.mirror.as_mut()) {
                mirror.apply_watcher_event(event);
            }
            match event {
                Ok(watcher::Event::Init) => self.listing = None,
                Ok(watcher::Event::InitApply(object)) => self.listing = Some(Arc::new(object)),
                Ok(watcher::Event::InitDone) => return Seen::Now(self.listing.take()),
                Ok(watcher::Event::Apply(object)) => return Seen::Now(Some(Arc::new(object))),
                Ok(watcher::Event::Delete(_)) => return Seen::Now(None),
                Err(e) => return Seen::Failed(e),
            }
        }
    }
}

/// Whether a watch failed because the identity may not watch: its
/// listing refused with 403.
pub(crate) fn refused(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 403
    )
}

/// The Node watch.
pub(crate) type NodeWatch = Watch<Node>;

/// The Node as its watch last saw it, for the tasks that write to it.
#[derive(Debug, Clone, Default)]
pub(crate) enum NodeSeen {
    /// Not listed yet.
    #[default]
    NotYet,
    /// It is as given (`None`: it does not exist).
    Now(Option<Arc<Node>>),
}

/// The agent's one watch of its Node, until `shutdown`: keeps `mirror`'s
/// store current (the pods read the Node there) and tells `seen` of every
/// change (the writers check what they wrote against it). It follows the
/// current client: new credentials start it again, the store keeping what
/// it has until the new listing replaces it whole.
pub(crate) async fn watch_node(
    mut connection: watch::Receiver<Connection>,
    name: String,
    mirror: Option<Writer<Node>>,
    seen: watch::Sender<NodeSeen>,
    shutdown: CancellationToken,
) {
    let client = connection.borrow_and_update().client.clone();
    let mut node = NodeWatch::new(client, &name).mirroring(mirror);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            Ok(()) = connection.changed() => {
                let client = connection.borrow_and_update().client.clone();
                let mirror = node.into_mirror();
                node = NodeWatch::new(client, &name).mirroring(mirror);
            }
            change = node.next() => match change {
                Seen::Now(now) => {
                    seen.send_replace(NodeSeen::Now(now));
                }
                Seen::Failed(e) => {
                    tracing::debug!(error = %e, "watching the Node failed; watching again");
                }
            },
        }
    }
}
/// The CSINode watch.
pub(crate) type CsiNodeWatch = Watch<CSINode>;

/// How the CSINode is followed.
pub(crate) enum CsiNodeFollow {
    Watching(CsiNodeWatch),
    /// The identity may not watch it: read it when the Node changes and
    /// every `csinode_recheck`.
    Reading {
        next: Option<Instant>,
    },
}

/// The CSINode's next change when it is watched; never, when it is read.
pub(crate) async fn next_csinode(watch: &mut Option<&mut CsiNodeWatch>) -> Seen<CSINode> {
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// Whether `seen` is at least as new as `known` (a Node that does not
/// exist, or one not known yet, counts as news).
pub(crate) fn newer<K: kube::Resource>(seen: Option<&K>, known: Option<&K>) -> bool {
    match (seen, known) {
        (Some(seen), Some(known)) => version(seen) >= version(known),
        _ => true,
    }
}

/// An object's resourceVersion as a number (0 when it has none).
pub(crate) fn version<K: kube::Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

//! The pods bound to this node, watched as the kubelet watches them
//! (`fieldSelector=spec.nodeName=<node>`, which the Node authorizer lets a
//! node identity list and watch) into a kube-runtime [`Store`]: the store
//! holds every pod bound to the node, a listing (at start, and whenever
//! the watch has to start over) replacing its content whole, so that pods
//! deleted meanwhile are gone from it. The pods owner is told when a
//! listing is in and of each change after it. The watch follows the
//! current client: when the credentials change it starts again with the
//! new one, and the store keeps its pods until the new listing.
//!
//! [`Store`]: kube::runtime::reflector::Store

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::kube_api::Connection;

/// What the watch saw.
#[derive(Debug)]
pub(crate) enum PodWatchEvent {
    /// A listing is in: the store holds it (and any change seen since),
    /// and pods not in the store are gone.
    Listed,
    /// A pod was bound to the node or changed (as the store has it).
    Applied(Arc<Pod>),
    /// A pod was deleted.
    Deleted(Arc<Pod>),
    /// The watch failed; it starts again by itself, with backoff.
    Failed(Arc<watcher::Error>),
}

/// Watches the pods bound to `node` through the current client of
/// `connection` into `store`, and tells `events` what changed, until
/// `shutdown` or until nobody listens.
pub(crate) async fn watch_pods(
    mut connection: watch::Receiver<Connection>,
    node: String,
    mut store: Writer<Pod>,
    events: mpsc::UnboundedSender<PodWatchEvent>,
    shutdown: CancellationToken,
) {
    let reader = store.as_reader();
    loop {
        let client = connection.borrow_and_update().client.clone();
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let mut stream = watcher(api, config).default_backoff().boxed();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                changed = connection.changed() => match changed {
                    // New credentials: watch again with them.
                    Ok(()) => break,
                    Err(_) => return,
                },
                event = stream.next() => event,
            };
            let event = match event {
                // A watcher's stream does not end; if it did, watch again.
                None => break,
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    if events.send(PodWatchEvent::Failed(Arc::new(e))).is_err() {
                        return;
                    }
                    continue;
                }
            };
            store.apply_watcher_event(&event);
            let seen = match event {
                // The listing is gathered by the store's writer.
                watcher::Event::Init | watcher::Event::InitApply(_) => continue,
                watcher::Event::InitDone => PodWatchEvent::Listed,
                watcher::Event::Apply(pod) => {
                    let stored = reader.get(&ObjectRef::from_obj(&pod));
                    PodWatchEvent::Applied(stored.unwrap_or_else(|| Arc::new(pod)))
                }
                watcher::Event::Delete(pod) => PodWatchEvent::Deleted(Arc::new(pod)),
            };
            if events.send(seen).is_err() {
                return;
            }
        }
    }
}

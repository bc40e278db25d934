//! The pods bound to this node, watched as the kubelet watches them
//! (`fieldSelector=spec.nodeName=<node>`, which the Node authorizer lets a
//! node identity list and watch). A listing (at start, and whenever the
//! watch has to start over) is handed on whole, so that pods deleted
//! meanwhile are noticed; then each change. The watch follows the current
//! client: when the credentials change it starts again with the new one.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::kube_api::Connection;

/// What the watch saw.
#[derive(Debug)]
pub(crate) enum PodWatchEvent {
    /// Every pod bound to the node now (a listing): pods not among them
    /// are gone.
    Listed(Vec<Arc<Pod>>),
    /// A pod was bound to the node or changed.
    Applied(Arc<Pod>),
    /// A pod was deleted.
    Deleted(Arc<Pod>),
    /// The watch failed; it starts again by itself, with backoff.
    Failed(Arc<watcher::Error>),
}

/// Watches the pods bound to `node` through the current client of
/// `connection` and sends what it sees to `events`, until `shutdown` or
/// until nobody listens.
pub(crate) async fn watch_pods(
    mut connection: watch::Receiver<Connection>,
    node: String,
    events: mpsc::UnboundedSender<PodWatchEvent>,
    shutdown: CancellationToken,
) {
    loop {
        let client = connection.borrow_and_update().client.clone();
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut listing: Option<Vec<Arc<Pod>>> = None;
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
            let seen = match event {
                // A watcher's stream does not end; if it did, watch again.
                None => break,
                Some(Ok(watcher::Event::Init)) => {
                    listing = Some(Vec::new());
                    continue;
                }
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    listing.get_or_insert_with(Vec::new).push(Arc::new(pod));
                    continue;
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    PodWatchEvent::Listed(listing.take().unwrap_or_default())
                }
                Some(Ok(watcher::Event::Apply(pod))) => PodWatchEvent::Applied(Arc::new(pod)),
                Some(Ok(watcher::Event::Delete(pod))) => PodWatchEvent::Deleted(Arc::new(pod)),
                Some(Err(e)) => PodWatchEvent::Failed(Arc::new(e)),
            };
            if events.send(seen).is_err() {
                return;
            }
        }
    }
}

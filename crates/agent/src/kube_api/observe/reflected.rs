//! Objects of one kind kept current in a kube-runtime [`Store`], as the
//! kubelet keeps its informers' caches: listed once, then watched, listed
//! again whenever the watch has to start over. The watch follows the
//! current client: when the credentials change it starts again with the
//! new one, and the store keeps its objects until the new listing
//! replaces them whole. Readers ask the store; no request per read.

use futures::StreamExt;
use kube::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use nodeplugins_api::retry::{Retry, Said};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kube_api::Connection;

/// What a watch of one kind needs of its objects: a kind known at compile
/// time, read from JSON, and kept across tasks.
pub(crate) trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Keeps `writer`'s store current with the objects `api` gives for the
/// current client of `connection` and that `config` selects, until
/// `shutdown`. `what` names them in log lines.
pub(crate) async fn reflect<K>(
    what: &'static str,
    mut connection: watch::Receiver<Connection>,
    api: impl Fn(kube::Client) -> Api<K>,
    config: watcher::Config,
    mut writer: Writer<K>,
    shutdown: CancellationToken,
) where
    K: Watched,
{
    let mut failures: Retry<String> = Retry::default();
    loop {
        let client = connection.borrow_and_update().client.clone();
        let mut events = watcher(api(client), config.clone())
            .default_backoff()
            .boxed();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                changed = connection.changed() => match changed {
                    // New credentials: watch again with them.
                    Ok(()) => break,
                    Err(_) => return,
                },
                event = events.next() => event,
            };
            match event {
                // A watcher's stream does not end; if it did, watch again.
                None => break,
                Some(Ok(event)) => {
                    if matches!(event, watcher::Event::InitDone)
                        && failures.succeeded() == Said::Recovered
                    {
                        tracing::info!(what, "watching again");
                    }
                    writer.apply_watcher_event(&event);
                }
                Some(Err(e)) => {
                    let text = e.to_string();
                    if failures.record(text.clone()) == Said::NewError {
                        tracing::warn!(what, error = %text, "watching failed; watching again with backoff");
                    }
                }
            }
        }
    }
}

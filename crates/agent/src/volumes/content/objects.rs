//! ConfigMaps and Secrets as a node reads them, in one place for every
//! pod: one list and watch per object a pod refers to, named by a field
//! selector (`metadata.name=<name>` in its namespace), as the kubelet's
//! watch-based manager keeps them, since the Node authorizer lets a node
//! read an object only by name and only while a pod of the node refers to
//! it. A watch starts with the first pod that refers to its object and
//! stops with the last; reading an object waits at most a second for its
//! watch's first listing, as the kubelet does.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kube_api::Connection;

/// How long a read waits for its object's first listing.
const FIRST_LISTING: Duration = Duration::from_secs(1);

/// Why an object could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ObjectError {
    /// Its watch has not listed it yet.
    #[error("failed to sync {kind} cache: timed out waiting for the condition")]
    NotSynced { kind: &'static str },
    /// No pod refers to it (a bug: reads follow a registration).
    #[error("object \"{namespace}\"/\"{name}\" not registered")]
    NotRegistered { namespace: String, name: String },
}

/// The watches of one kind of object.
pub(crate) struct ObjectWatches<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    kind: &'static str,
    connection: watch::Receiver<Connection>,
    watches: Mutex<HashMap<(String, String), Watched<K>>>,
}

struct Watched<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    pods: BTreeSet<String>,
    stop: CancellationToken,
}

impl<K> ObjectWatches<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Watches of `kind` (for messages) through `connection`'s client.
    pub(crate) fn new(kind: &'static str, connection: watch::Receiver<Connection>) -> Self {
        Self {
            kind,
            connection,
            watches: Mutex::new(HashMap::new()),
        }
    }

    /// Pod `uid` refers to `namespace`/`name`: its watch starts if it is
    /// the first.
    pub(crate) fn register(&self, namespace: &str, name: &str, uid: &str) {
        let Ok(mut watches) = self.watches.lock() else {
            return;
        };
        let key = (namespace.to_string(), name.to_string());
        if let Some(watched) = watches.get_mut(&key) {
            watched.pods.insert(uid.to_string());
            return;
        }
        let (store, writer) = reflector::store();
        let stop = CancellationToken::new();
        let api: Api<K> = Api::namespaced(self.connection.borrow().client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let kind = self.kind;
        let (ns, object) = (namespace.to_string(), name.to_string());
        let failed = move |e: &watcher::Error| {
            tracing::warn!(kind, namespace = %ns, name = %object, error = %e, "watching an object a pod's volume refers to failed; watching again with backoff");
        };
        spawn_watch(api, config, writer, stop.clone(), (|| {}, failed));
        let mut pods = BTreeSet::new();
        pods.insert(uid.to_string());
        watches.insert(key, Watched { store, pods, stop });
    }

    /// Pod `uid` refers to nothing any more: the watches only it used
    /// stop.
    pub(crate) fn unregister_pod(&self, uid: &str) {
        let Ok(mut watches) = self.watches.lock() else {
            return;
        };
        watches.retain(|_, watched| {
            watched.pods.remove(uid);
            let keep = !watched.pods.is_empty();
            if !keep {
                watched.stop.cancel();
            }
            keep
        });
    }

    /// `namespace`/`name` as its watch has it (`None`: it does not exist),
    /// once its watch listed it.
    pub(crate) async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<K>>, ObjectError> {
        let store = {
            let watches = self.watches.lock().ok();
            watches.and_then(|w| {
                w.get(&(namespace.to_string(), name.to_string()))
                    .map(|w| w.store.clone())
            })
        };
        let Some(store) = store else {
            return Err(ObjectError::NotRegistered {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        };
        match tokio::time::timeout(FIRST_LISTING, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(store.get(&ObjectRef::new(name).within(namespace))),
            _ => Err(ObjectError::NotSynced { kind: self.kind }),
        }
    }

    /// How many objects are watched.
    pub(crate) fn watched(&self) -> usize {
        self.watches.lock().map_or(0, |w| w.len())
    }
}

/// Runs `api`'s watch (with `config`) into `writer` on a task of its own
/// until `stop`, with the watcher's backoff; each object it applies is
/// told to `applied`, the first failure of a run of them to `failed`.
pub(crate) fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    stop: CancellationToken,
    (applied, failed): (
        impl Fn() + Send + 'static,
        impl Fn(&watcher::Error) + Send + 'static,
    ),
) where
    K: kube::Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let stream = watcher(api, config)
            .default_backoff()
            .reflect(writer)
            .applied_objects();
        futures::pin_mut!(stream);
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                item = stream.next() => match item {
                    None => return,
                    Some(Ok(_)) => {
                        failing = false;
                        applied();
                    }
                    Some(Err(e)) => {
                        if !failing {
                            failed(&e);
                        }
                        failing = true;
                    }
                },
            }
        }
    });
}

impl<K> Drop for ObjectWatches<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let Ok(watches) = self.watches.lock() {
            for watched in watches.values() {
                watched.stop.cancel();
            }
        }
    }
}

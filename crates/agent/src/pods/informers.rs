//! What the pods read from the API besides pods and claims, kept current
//! by watches as the kubelet keeps it in its informers: the node's own
//! Node (its allocatable resources for admission, its address for the
//! pod's `hostIP`), the cluster's Services (the containers' service
//! variables) and RuntimeClasses (the runtime handler a pod's sandbox
//! runs on). A read asks the cache and sends no request; before the
//! first listing it waits for it, up to the request timeout. The Node's
//! cache is the one the Kubernetes API publisher's watch of the Node keeps
//! ([`KubeApiHandle::node`](crate::kube_api::KubeApiHandle::node)): one
//! watch of the Node per agent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::kube_api::{Connection, reflect};

/// The caches' readers. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Informers {
    node_name: String,
    node: Store<Node>,
    services: Store<Service>,
    runtime_classes: Store<RuntimeClass>,
    /// How long a read waits for a cache's first listing.
    first_listing: Duration,
}

/// The Services cache's writer, until its watch starts.
pub(crate) struct InformerWriters {
    services: Writer<Service>,
    runtime_classes: Writer<RuntimeClass>,
}

/// A cache not listed yet.
#[derive(Debug, thiserror::Error)]
#[error("{0} have not yet been read at least once")]
pub(crate) struct NotListed(&'static str);

impl Informers {
    /// The caches for node `node_name`, its Node read from `node` (kept
    /// current elsewhere); a read waits up to `first_listing` for a
    /// cache's first listing.
    pub(crate) fn new(
        node_name: String,
        node: Store<Node>,
        first_listing: Duration,
    ) -> (Self, InformerWriters) {
        let (services, services_writer) = reflector::store();
        let (runtime_classes, runtime_classes_writer) = reflector::store();
        let informers = Self {
            node_name,
            node,
            services,
            runtime_classes,
            first_listing,
        };
        let writers = InformerWriters {
            services: services_writer,
            runtime_classes: runtime_classes_writer,
        };
        (informers, writers)
    }

    /// Starts the watches that fill the Services and RuntimeClasses
    /// caches, on `tasks`, until `shutdown`.
    pub(crate) fn start(
        &self,
        writers: InformerWriters,
        connection: &watch::Receiver<Connection>,
        tasks: &TaskTracker,
        shutdown: &CancellationToken,
    ) {
        tasks.spawn(reflect(
            "the cluster's Services",
            connection.clone(),
            Api::<Service>::all,
            watcher::Config::default(),
            writers.services,
            shutdown.clone(),
        ));
        tasks.spawn(reflect(
            "the cluster's RuntimeClasses",
            connection.clone(),
            Api::<RuntimeClass>::all,
            watcher::Config::default(),
            writers.runtime_classes,
            shutdown.clone(),
        ));
    }

    /// The runtime handler of RuntimeClass `name` (none: the runtime's
    /// default handler), as the kubelet's `LookupRuntimeHandler`; an error
    /// is its message.
    pub(crate) async fn runtime_handler(&self, name: Option<&str>) -> Result<String, String> {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Ok(String::new());
        };
        self.listed(&self.runtime_classes, "runtimeclasses")
            .await
            .map_err(|e| format!("failed to lookup RuntimeClass {name}: {e}"))?;
        match self.runtime_classes.get(&ObjectRef::new(name)) {
            Some(class) => Ok(class.handler.clone()),
            None => Err(format!("runtimeclass.node.k8s.io {name:?} not found")),
        }
    }

    async fn listed<K>(&self, store: &Store<K>, what: &'static str) -> Result<(), NotListed>
    where
        K: kube::runtime::reflector::Lookup + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        match tokio::time::timeout(self.first_listing, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(NotListed(what)),
        }
    }

    /// Whether the Services were listed once: a static pod does not wait
    /// for them (it may be the API server itself), and gets what the cache
    /// holds, as the kubelet's.
    pub(crate) fn services_listed(&self) -> bool {
        use futures::FutureExt;
        self.services
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|ready| ready.is_ok())
    }

    /// The node's Node as last seen, without waiting for a first listing
    /// (`None` too before it).
    pub(crate) fn node_now(&self) -> Option<Arc<Node>> {
        self.node.get(&ObjectRef::new(&self.node_name))
    }

    /// The node's Node, as last seen (`None`: it does not exist).
    pub(crate) async fn node(&self) -> Result<Option<Arc<Node>>, NotListed> {
        self.listed(&self.node, "the node's Node").await?;
        Ok(self.node.get(&ObjectRef::new(&self.node_name)))
    }

    /// The node's allocatable resources as its Node shows them (resource
    /// → quantity); empty when the Node does not exist.
    pub(crate) async fn node_allocatable(&self) -> Result<BTreeMap<String, String>, NotListed> {
        let node = self.node().await?;
        Ok(node
            .and_then(|n| n.status.as_ref()?.allocatable.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|(resource, quantity)| (resource, quantity.0))
            .collect())
    }

    /// The node's address (its first `InternalIP`, else its first
    /// address), as its Node shows it.
    pub(crate) async fn node_ip(&self) -> Result<Option<String>, NotListed> {
        let node = self.node().await?;
        let addresses = node
            .and_then(|n| n.status.as_ref()?.addresses.clone())
            .unwrap_or_default();
        Ok(addresses
            .iter()
            .find(|a| a.type_ == "InternalIP")
            .or_else(|| addresses.first())
            .map(|a| a.address.clone()))
    }

    /// The Services of `namespace`.
    pub(crate) async fn services_in(
        &self,
        namespace: &str,
    ) -> Result<Vec<Arc<Service>>, NotListed> {
        self.listed(&self.services, "services").await?;
        Ok(self
            .services
            .state_filter(|s| s.metadata.namespace.as_deref() == Some(namespace)))
    }

    /// The Service `namespace/name`, if it exists.
    pub(crate) async fn service(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Service>>, NotListed> {
        self.listed(&self.services, "services").await?;
        Ok(self.services.get(&ObjectRef::new(name).within(namespace)))
    }
}

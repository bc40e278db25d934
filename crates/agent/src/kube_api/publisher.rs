//! The API publisher as embedders and the agent see it: built from a
//! configuration and what it publishes ([`KubeApi::connect`]) with its
//! handle (status, events, metrics; the client, for the pods owner; the
//! ResourceSlice cleanup hook), then run until shutdown.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, store::Writer};
use nodeplugins_api::backoff::Backoff;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::config::KubeApiConfig;
use super::credentials::{Connection, Credentials};
use super::error::KubeApiError;
use super::metrics::KubeApiMetrics;
use super::owner::Owner;
use super::resource_slices::{ResourceSliceCleanup, WipeReport};
use super::status::KubeApiStatus;
use super::write_state::RetryPolicy;
use crate::csi::CsiDriverStore;
use crate::device::DeviceHandle;
use crate::event::AgentEvent;
use crate::published::{Publisher, Store};

/// The task that publishes the node's plugins to the API server.
/// [`connect`](Self::connect) gives it with its [`KubeApiHandle`] (which
/// also hands out the client and the DRA manager's
/// [`ResourceSliceCleanup`] hook); [`run`](Self::run) it.
pub struct KubeApi {
    config: KubeApiConfig,
    credentials: Credentials,
    connection: watch::Receiver<Connection>,
    /// What is published: the device manager's resources and the CSI drivers.
    devices: DeviceHandle,
    csi: CsiDriverStore,
    events: broadcast::Sender<AgentEvent>,
    metrics: KubeApiMetrics,
    status: Publisher<KubeApiStatus>,
    wipes: mpsc::UnboundedReceiver<WipeReport>,
    /// The Node store the owner's watch keeps current.
    node_mirror: Writer<Node>,
}

impl KubeApi {
    /// A publisher of `devices`' resources and `csi`'s drivers for
    /// `config`'s node, and its handle; reads the configuration and the
    /// credentials, but sends nothing yet.
    pub async fn connect(
        config: KubeApiConfig,
        devices: DeviceHandle,
        csi: CsiDriverStore,
    ) -> Result<(Self, KubeApiHandle), KubeApiError> {
        let credentials = Credentials::load(config.source.clone(), config.request_timeout).await?;
        let connection = credentials.subscribe();
        let status = KubeApiStatus {
            server: connection.borrow().server.clone(),
            node: config.node_name.clone(),
            user: None,
            last_success_unix_ms: None,
            pending: Vec::new(),
            last_error: None,
            failures: 0,
        };
        let (wipes_tx, wipes) = mpsc::unbounded_channel();
        let (status, store) = Publisher::new(status);
        let (node_store, node_mirror) = reflector::store();
        let publisher = Self {
            credentials,
            devices,
            csi,
            events: broadcast::channel(256).0,
            metrics: KubeApiMetrics::default(),
            status,
            wipes,
            connection,
            config,
            node_mirror,
        };
        let handle = KubeApiHandle {
            status: store,
            events: publisher.events.clone(),
            metrics: publisher.metrics.clone(),
            connection: publisher.connection.clone(),
            node: publisher.config.node_name.clone(),
            node_store,
            wipes: wipes_tx,
        };
        Ok((publisher, handle))
    }

    /// Publishes until `shutdown`. Ends early, with the error, when the
    /// credentials are another node's.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), KubeApiError> {
        tracing::info!(server = %self.connection.borrow().server, node = %self.config.node_name, "publishing to the Kubernetes API");
        let watcher = self.config.fs_watcher.clone();
        let credentials = self.credentials.run(watcher, shutdown.clone());
        let policy = RetryPolicy {
            backoff: Backoff::new(self.config.retry_initial, self.config.retry_max)
                .with_jitter(self.config.retry_jitter),
            slowly: Backoff::new(
                self.config.refused_retry_initial,
                self.config.refused_retry_max,
            )
            .with_jitter(self.config.retry_jitter),
        };
        let owner = Owner {
            config: self.config,
            policy,
            connection: self.connection,
            devices: self.devices,
            csi: self.csi,
            wipes: self.wipes,
            events: self.events,
            metrics: self.metrics,
            status: self.status,
            node_mirror: Some(self.node_mirror),
        };
        // The credentials are kept current beside the owner, in this task;
        // they end at shutdown, the owner then too (or earlier, failing).
        let owning = owner.run(shutdown);
        tokio::pin!(owning);
        tokio::select! {
            result = &mut owning => result,
            () = credentials => owning.await,
        }
    }
}

/// Reads the publisher's status and events, and hands out what reads and
/// deletes with its credentials. Cheap to clone.
#[derive(Clone)]
pub struct KubeApiHandle {
    status: Store<KubeApiStatus>,
    events: broadcast::Sender<AgentEvent>,
    metrics: KubeApiMetrics,
    connection: watch::Receiver<Connection>,
    node: String,
    node_store: reflector::Store<Node>,
    wipes: mpsc::UnboundedSender<WipeReport>,
}

impl KubeApiHandle {
    /// The connection's status after the publisher's latest change.
    pub fn snapshot(&self) -> Arc<KubeApiStatus> {
        self.status.get()
    }

    /// A counter that increases on every change of the status.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.status.changes()
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.events.subscribe()
    }

    /// The writes' metrics.
    pub fn metrics(&self) -> &KubeApiMetrics {
        &self.metrics
    }

    /// The current client, and every one built after it (the credentials
    /// changed): for whatever else reads or writes as this node.
    pub fn connection(&self) -> watch::Receiver<Connection> {
        self.connection.clone()
    }

    /// The node's own Node, as the publisher's watch of it last saw it
    /// (the one watch of the Node: the pods read it here). Empty, and not
    /// ready, until the publisher runs and lists it.
    pub fn node(&self) -> reflector::Store<Node> {
        self.node_store.clone()
    }

    /// The DRA cleanup hook that deletes the node's ResourceSlices; what it
    /// finds shows in the publisher's status.
    pub fn slice_cleanup(&self) -> ResourceSliceCleanup {
        ResourceSliceCleanup {
            connection: self.connection.clone(),
            node: self.node.clone(),
            reports: self.wipes.clone(),
        }
    }
}

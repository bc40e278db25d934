//! The API publisher as embedders and the agent see it: built from a
//! configuration and what it publishes ([`KubeApi::connect`]) with its
//! handle (status, events, metrics; the client, for the pods owner; the
//! ResourceSlice cleanup hook), then run until shutdown as one small task
//! per kind of write over the one watch of the Node:
//!
//! - the Node watch ([`observed::watch_node`]) keeps the Node store the
//!   pods read and tells the writers of each change;
//! - the node status ([`NodeStatusWriter`]) and the CSI drivers
//!   ([`CsiNodeWriter`]) are each written by a task of their own, on a
//!   change of what they write or of what the server shows;
//! - the node's Lease is renewed ([`NodeLease`]) while the pods are
//!   served, and, when the agent registers the node, the Node is made
//!   and the kubelet's part of its status kept ([`KubeletNode`]), with
//!   the runtime's readiness asked every 5 s ([`RuntimeState`]);
//! - who the credentials are is asked and checked ([`IdentityCheck`]);
//! - the ResourceSlice wipes are counted by the hook itself, in the
//!   caller's task.
//!
//! They share the status through a [`Reporter`]; none waits for another.

use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, store::Writer};
use nodeplugins_api::backoff::Backoff;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::config::{KubeApiConfig, KubeConfigSource};
use super::error::KubeApiError;
use super::metrics::KubeApiMetrics;
use super::resource_slices::{ResourceSliceCleanup, WipeFailures};
use super::status::KubeApiStatus;
use crate::csi::CsiDriverStore;
use crate::device::DeviceHandle;
use crate::event::AgentEvent;
use crate::kube_api::client::credentials::{Connection, Credentials};
use crate::kube_api::client::identity::IdentityCheck;
use crate::kube_api::client_certificate::bootstrap::load_client_cert;
use crate::kube_api::client_certificate::rotation::Rotation;
use crate::kube_api::csi::csi_node_writer::CsiNodeWriter;
use crate::kube_api::node::kubelet_node::KubeletNode;
use crate::kube_api::node::lease::NodeLease;
use crate::kube_api::node::node_status_writer::NodeStatusWriter;
use crate::kube_api::node::runtime_state::RuntimeState;
use crate::kube_api::node::volumes_in_use::VolumesInUse;
use crate::kube_api::observe::observed::{self, NodeSeen};
use crate::kube_api::writes::report::Reporter;
use crate::kube_api::writes::write_state::RetryPolicy;
use crate::published::{Publisher, Store};
use crate::runtime::ContainerRuntime;

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
    reporter: Reporter,
    /// The Node store the Node watch keeps current.
    node_mirror: Writer<Node>,
    volumes_in_use: VolumesInUse,
    /// The node's runtime, when the agent registers the node (its
    /// readiness is the Node's Ready condition).
    runtime: Option<Arc<dyn ContainerRuntime>>,
    /// Whether the node is shutting down, when its shutdown is handled.
    shutting_down: Option<watch::Receiver<bool>>,
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
        if let (Some(certs), KubeConfigSource::Kubeconfig(path)) =
            (&config.client_certificates, &config.source)
        {
            load_client_cert(path, certs, &config.node_name)
                .await
                .map_err(KubeApiError::ClientCertificate)?;
        }
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
        let (status, store) = Publisher::new(status);
        let (node_store, node_mirror) = reflector::store();
        let events = broadcast::channel(256).0;
        let volumes_in_use = VolumesInUse::new();
        let metrics = KubeApiMetrics::default();
        let reporter = Reporter::new(
            events.clone(),
            metrics.clone(),
            connection.clone(),
            config.node_name.clone(),
            status,
        );
        let handle = KubeApiHandle {
            status: store,
            events,
            metrics,
            connection: connection.clone(),
            node: config.node_name.clone(),
            node_store,
            reporter: reporter.clone(),
            wipe_failures: WipeFailures::default(),
            volumes_in_use: volumes_in_use.clone(),
        };
        let publisher = Self {
            credentials,
            devices,
            csi,
            reporter,
            connection,
            config,
            node_mirror,
            volumes_in_use,
            runtime: None,
            shutting_down: None,
        };
        Ok((publisher, handle))
    }

    /// The runtime the node's pods run on: with
    /// [`KubeApiConfig::node_registration`], its readiness (asked every
    /// 5 s), version and handlers go into the Node's status. Without it,
    /// a registered node is never Ready.
    pub fn with_runtime(mut self, runtime: Arc<dyn ContainerRuntime>) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The node's shutdown as `shutting_down` follows it (a
    /// [`NodeShutdownManager`](crate::node_shutdown::NodeShutdownManager)'s):
    /// while it is true the registered Node is not ready (`node is
    /// shutting down`), its status written at once when it changes.
    pub fn with_node_shutdown(mut self, shutting_down: watch::Receiver<bool>) -> Self {
        self.shutting_down = Some(shutting_down);
        self
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
        let config = self.config;
        let stop = shutdown.child_token();
        let (node_seen, seen) = watch::channel(NodeSeen::NotYet);
        let mut tasks: JoinSet<Result<(), KubeApiError>> = JoinSet::new();
        let watching = observed::watch_node(
            self.connection.clone(),
            config.node_name.clone(),
            Some(self.node_mirror),
            node_seen,
            stop.clone(),
        );
        tasks.spawn(watching.map(Ok));
        let node_status = NodeStatusWriter::new(
            config.node_name.clone(),
            config.settle,
            policy,
            self.devices.store(),
            &self.volumes_in_use,
            self.reporter.clone(),
        );
        let writing = node_status.run(self.connection.clone(), seen.clone(), stop.clone());
        tasks.spawn(writing.map(Ok));
        let csi_node = CsiNodeWriter::new(
            config.node_name.clone(),
            config.settle,
            config.csinode_recheck,
            policy,
            self.csi,
            self.reporter.clone(),
        );
        let writing = csi_node.run(self.connection.clone(), seen.clone(), stop.clone());
        tasks.spawn(writing.map(Ok));
        if config.serve_pods
            && let Some(duration) = config.node_lease_duration
        {
            let lease = NodeLease::new(config.node_name.clone(), duration);
            tasks.spawn(
                lease
                    .run(self.connection.clone(), seen.clone(), stop.clone())
                    .map(Ok),
            );
        }
        if config.serve_pods
            && let Some(registration) = config.node_registration.clone()
        {
            let runtime_state = RuntimeState::new();
            let node = KubeletNode::new(
                config.node_name.clone(),
                registration,
                runtime_state.subscribe(),
                self.shutting_down.clone(),
            );
            tasks.spawn(
                node.run(self.connection.clone(), seen.clone(), stop.clone())
                    .map(Ok),
            );
            if let Some(runtime) = self.runtime.clone() {
                tasks.spawn(runtime_state.poll(runtime, stop.clone()).map(Ok));
            }
        }
        if let (Some(certs), KubeConfigSource::Kubeconfig(path)) =
            (&config.client_certificates, &config.source)
            && certs.rotate
            && let Some(rotation) =
                Rotation::for_kubeconfig(path, &certs.cert_dir, &config.node_name)
        {
            tasks.spawn(rotation.run(self.connection.clone(), stop.clone()).map(Ok));
        }
        let identity = IdentityCheck::new(config.node_name.clone(), policy.backoff);
        tasks.spawn(identity.run(self.connection.clone(), self.reporter, stop.clone()));
        // The credentials are kept current beside the tasks, in this task;
        // they end at shutdown, the tasks then too (or earlier, one of them
        // failing, which ends them all).
        tokio::pin!(credentials);
        let mut credentials_done = false;
        let mut result = Ok(());
        loop {
            tokio::select! {
                () = &mut credentials, if !credentials_done => credentials_done = true,
                ended = tasks.join_next() => match ended {
                    None => break,
                    Some(Ok(Ok(()))) => {}
                    Some(Ok(Err(fatal))) => {
                        stop.cancel();
                        if result.is_ok() {
                            result = Err(fatal);
                        }
                    }
                    Some(Err(error)) => {
                        // A write task panicked: what it wrote stops, so
                        // the publisher ends rather than go on half done.
                        tracing::error!(%error, "a Kubernetes API task ended without an answer");
                        stop.cancel();
                        if result.is_ok() {
                            result = Err(KubeApiError::TaskLost(error.to_string()));
                        }
                    }
                },
            }
        }
        result
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
    reporter: Reporter,
    wipe_failures: WipeFailures,
    volumes_in_use: VolumesInUse,
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

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.node
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

    /// Where the volume manager says the volumes in use, for the Node's
    /// status.
    pub(crate) fn volumes_in_use(&self) -> VolumesInUse {
        self.volumes_in_use.clone()
    }

    /// The DRA cleanup hook that deletes the node's ResourceSlices; what it
    /// finds shows in the publisher's status.
    pub fn slice_cleanup(&self) -> ResourceSliceCleanup {
        ResourceSliceCleanup {
            connection: self.connection.clone(),
            node: self.node.clone(),
            reporter: self.reporter.clone(),
            failures: self.wipe_failures.clone(),
        }
    }
}

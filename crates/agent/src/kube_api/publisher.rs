//! The API publisher as embedders and the agent see it: built from a
//! configuration ([`KubeApi::connect`]), giving out handles (status,
//! events, metrics; the pod-claims reader; the ResourceSlice cleanup hook),
//! then run until shutdown.

use std::sync::Arc;

use nodeplugins_api::backoff::Backoff;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::config::KubeApiConfig;
use super::credentials::{Connection, Credentials, Reload, reload_channel};
use super::error::KubeApiError;
use super::metrics::KubeApiMetrics;
use super::owner::Owner;
use super::resource_slices::{ResourceSliceCleanup, WipeReport};
use super::status::KubeApiStatus;
use super::write_state::RetryPolicy;
use crate::csi::CsiDriverStore;
use crate::device::DeviceHandle;
use crate::event::AgentEvent;

/// Publishes the node's plugins to the API server. Take a
/// [`handle`](Self::handle) and the [`slice_cleanup`](Self::slice_cleanup)
/// hook for the DRA manager, then [`run`](Self::run) it.
pub struct KubeApi {
    config: KubeApiConfig,
    credentials: Credentials,
    reload: (Reload, mpsc::Receiver<()>),
    connection: watch::Receiver<Connection>,
    events: broadcast::Sender<AgentEvent>,
    metrics: KubeApiMetrics,
    status: watch::Sender<Arc<KubeApiStatus>>,
    wipes: (
        mpsc::UnboundedSender<WipeReport>,
        mpsc::UnboundedReceiver<WipeReport>,
    ),
}

impl KubeApi {
    /// A publisher for `config`'s node; reads the configuration and the
    /// credentials, but sends nothing yet.
    pub async fn connect(config: KubeApiConfig) -> Result<Self, KubeApiError> {
        let credentials = Credentials::load(config.source.clone()).await?;
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
        Ok(Self {
            config,
            credentials,
            reload: reload_channel(),
            connection,
            events: broadcast::channel(256).0,
            metrics: KubeApiMetrics::default(),
            status: watch::channel(Arc::new(status)).0,
            wipes: mpsc::unbounded_channel(),
        })
    }

    /// A handle for status, events and metrics.
    pub fn handle(&self) -> KubeApiHandle {
        KubeApiHandle {
            status: self.status.subscribe(),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Reads pods and their claims with the current credentials, for
    /// pod-level prepare.
    pub fn pod_claims(&self) -> super::PodClaimsReader {
        super::PodClaimsReader::new(self.connection.clone(), self.config.request_timeout)
    }

    /// The DRA cleanup hook that deletes the node's ResourceSlices.
    pub fn slice_cleanup(&self) -> ResourceSliceCleanup {
        ResourceSliceCleanup {
            connection: self.connection.clone(),
            node: self.config.node_name.clone(),
            timeout: self.config.request_timeout,
            reports: self.wipes.0.clone(),
        }
    }

    /// Publishes `devices`' resources and `csi`'s drivers until `shutdown`.
    /// Ends early, with the error, when the credentials are another node's.
    pub async fn run(
        self,
        devices: DeviceHandle,
        csi: CsiDriverStore,
        shutdown: CancellationToken,
    ) -> Result<(), KubeApiError> {
        tracing::info!(server = %self.connection.borrow().server, node = %self.config.node_name, "publishing to the Kubernetes API");
        let (reload, reloads) = self.reload;
        let credentials = tokio::spawn(self.credentials.run(reloads, shutdown.clone()));
        let credentials = tokio_util::task::AbortOnDropHandle::new(credentials);
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
            reload,
            devices,
            csi,
            wipes: self.wipes.1,
            events: self.events,
            metrics: self.metrics,
            status: self.status,
        };
        let result = owner.run(shutdown).await;
        drop(credentials);
        result
    }
}

/// Reads the publisher's status and events. Cheap to clone.
#[derive(Clone)]
pub struct KubeApiHandle {
    status: watch::Receiver<Arc<KubeApiStatus>>,
    events: broadcast::Sender<AgentEvent>,
    metrics: KubeApiMetrics,
}

impl KubeApiHandle {
    /// The connection's status, as of the publisher's last change.
    pub fn status(&self) -> Arc<KubeApiStatus> {
        self.status.borrow().clone()
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.events.subscribe()
    }

    /// The writes' metrics.
    pub fn metrics(&self) -> &KubeApiMetrics {
        &self.metrics
    }
}

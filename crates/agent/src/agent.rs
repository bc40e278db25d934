//! The node agent `nodeplugins run` starts: the plugin manager on
//! `<root>/plugins_registry` with the CSI, device plugin and DRA handlers,
//! `kubelet.sock`, and the admin socket.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeplugins_api::constants::{layout, plugin_type};
use tokio_util::sync::CancellationToken;

use crate::admin::StatusSources;
use crate::csi::{CsiDriverStore, CsiHandler, NODE_GET_INFO_TIMEOUT};
use crate::device::{
    DeviceManager, DeviceManagerConfig, DevicePluginHandler, serve_kubelet_socket,
};
use crate::dra::{DraManager, DraManagerConfig, DraPluginHandler, DriverCleanup, LoggingCleanup};
use crate::handler::PluginHandler;
use crate::metrics::{MetricsSources, serve_metrics};
use crate::registry::{PluginManager, RegistryConfig, RegistryHandle, WatchError};

/// Settings of the agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The kubelet-style root directory (`/var/lib/kubelet` by default).
    pub root_dir: PathBuf,
    /// Plugin manager settings; its `dir` is `<root>/plugins_registry`.
    pub registry: RegistryConfig,
    /// Timeout of CSI NodeGetInfo calls.
    pub csi_timeout: Duration,
    /// Device manager settings; its `dir` is `<root>/device-plugins`.
    pub devices: DeviceManagerConfig,
    /// DRA manager settings.
    pub dra: DraManagerConfig,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`; `None` for nowhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// The default metrics address: loopback only.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:10261";

impl AgentConfig {
    /// Upstream defaults under `root_dir`.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        let root_dir = root_dir.into();
        let registry = RegistryConfig::new(root_dir.join(layout::PLUGINS_REGISTRY_DIR));
        let devices = DeviceManagerConfig::new(root_dir.join(layout::DEVICE_PLUGINS_DIR));
        Self {
            root_dir,
            registry,
            csi_timeout: NODE_GET_INFO_TIMEOUT,
            devices,
            dra: DraManagerConfig::default(),
            metrics_addr: None,
        }
    }
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The plugin registry could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The admin socket could not be served.
    #[error("admin socket: {0}")]
    Admin(#[from] nodeplugins_api::transport::TransportError),
    /// The metrics address could not be bound.
    #[error("metrics endpoint {addr}: {source}")]
    Metrics {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The node agent.
pub struct Agent {
    config: AgentConfig,
    manager: PluginManager,
    csi: Arc<CsiHandler>,
    devices: DeviceManager,
    dra: DraManager,
}

impl Agent {
    /// An agent with a handler for each built-in plugin type: CSI, device
    /// plugins and DRA drivers. Without an API server, a DRA driver's cleanup
    /// is only logged and recorded ([`LoggingCleanup`]).
    pub fn new(config: AgentConfig) -> Self {
        Self::with_dra_cleanup(config, Arc::new(LoggingCleanup))
    }

    /// An agent whose DRA manager calls `cleanup` when a driver stays
    /// unusable (an embedder with an API server deletes its ResourceSlices).
    pub fn with_dra_cleanup(config: AgentConfig, cleanup: Arc<dyn DriverCleanup>) -> Self {
        let manager = PluginManager::new(config.registry.clone());
        let csi = Arc::new(CsiHandler::new(config.csi_timeout));
        manager.add_handler(plugin_type::CSI, csi.clone());
        let devices = DeviceManager::new(config.devices.clone());
        manager.add_handler(
            plugin_type::DEVICE,
            Arc::new(DevicePluginHandler::new(devices.clone())),
        );
        let dra = DraManager::new(config.dra.clone(), cleanup);
        manager.add_handler(
            plugin_type::DRA,
            Arc::new(DraPluginHandler::new(dra.clone())),
        );
        Self {
            config,
            manager,
            csi,
            devices,
            dra,
        }
    }

    /// The DRA manager.
    pub fn dra(&self) -> DraManager {
        self.dra.clone()
    }

    /// The device manager.
    pub fn devices(&self) -> DeviceManager {
        self.devices.clone()
    }

    /// The registered CSI drivers.
    pub fn csi_drivers(&self) -> CsiDriverStore {
        self.csi.drivers()
    }

    /// Routes plugins of `plugin_type` to `handler` (replacing a built-in one).
    pub fn add_handler(&self, plugin_type: impl Into<String>, handler: Arc<dyn PluginHandler>) {
        self.manager.add_handler(plugin_type, handler);
    }

    /// Status and events of the plugin manager.
    pub fn registry(&self) -> RegistryHandle {
        self.manager.handle()
    }

    /// Runs until `shutdown` is cancelled or a part fails.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), AgentError> {
        std::fs::create_dir_all(&self.config.root_dir).map_err(|source| WatchError::CreateDir {
            dir: self.config.root_dir.clone(),
            source,
        })?;
        let (metrics_addr, metrics) = match self.config.metrics_addr {
            Some(addr) => {
                let sources = MetricsSources {
                    registry: self.manager.handle(),
                    devices: self.devices.clone(),
                    dra: self.dra.clone(),
                };
                let (bound, serving) = serve_metrics(addr, sources, shutdown.clone())
                    .await
                    .map_err(|source| AgentError::Metrics { addr, source })?;
                tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
                (Some(bound), Some(tokio::spawn(serving)))
            }
            None => (None, None),
        };
        let sources = StatusSources {
            registry: self.manager.handle(),
            csi: self.csi.drivers(),
            devices: self.devices.clone(),
            dra: self.dra.clone(),
            metrics_addr,
        };
        let admin = crate::admin::serve(
            self.config.root_dir.clone(),
            sources,
            SystemTime::now(),
            shutdown.clone(),
        );
        let kubelet_socket = serve_kubelet_socket(self.devices.clone(), shutdown.clone());
        self.dra.start();
        let manager = self.manager.run(shutdown.clone());
        let devices = self.devices.clone();
        let dra = self.dra.clone();
        let (managed, served, kubelet) = tokio::join!(
            stop_all_on_exit(manager, &shutdown),
            stop_all_on_exit(admin, &shutdown),
            async {
                let result = stop_all_on_exit(kubelet_socket, &shutdown).await;
                devices.stop();
                devices.wait_stopped().await;
                result
            }
        );
        dra.stop();
        dra.wait_stopped().await;
        if let Some(metrics) = metrics {
            let _ = metrics.await;
        }
        managed?;
        served?;
        kubelet?;
        Ok(())
    }
}

/// Runs one part of the agent; when it ends (normally only at shutdown, or
/// because it failed) the others are told to stop too.
async fn stop_all_on_exit<T>(part: impl Future<Output = T>, shutdown: &CancellationToken) -> T {
    let result = part.await;
    shutdown.cancel();
    result
}

//! The node agent `nodeplugins run` starts: the plugin manager on
//! `<root>/plugins_registry` plus the admin socket.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeplugins_api::constants::{layout, plugin_type};
use tokio_util::sync::CancellationToken;

use crate::admin::StatusSources;
use crate::csi::{CsiDriverStore, CsiHandler, NODE_GET_INFO_TIMEOUT};
use crate::handler::{LoggingHandler, PluginHandler};
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
}

impl AgentConfig {
    /// Upstream defaults under `root_dir`.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        let root_dir = root_dir.into();
        let registry = RegistryConfig::new(root_dir.join(layout::PLUGINS_REGISTRY_DIR));
        Self {
            root_dir,
            registry,
            csi_timeout: NODE_GET_INFO_TIMEOUT,
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
}

/// The node agent.
pub struct Agent {
    config: AgentConfig,
    manager: PluginManager,
    csi: Arc<CsiHandler>,
}

impl Agent {
    /// An agent with a handler for each built-in plugin type: the CSI
    /// handler, and until the device and DRA handlers exist, a
    /// [`LoggingHandler`] that accepts every plugin of those types.
    pub fn new(config: AgentConfig) -> Self {
        let manager = PluginManager::new(config.registry.clone());
        let csi = Arc::new(CsiHandler::new(config.csi_timeout));
        manager.add_handler(plugin_type::CSI, csi.clone());
        for kind in [plugin_type::DEVICE, plugin_type::DRA] {
            manager.add_handler(kind, LoggingHandler::new(kind));
        }
        Self {
            config,
            manager,
            csi,
        }
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
        let sources = StatusSources {
            registry: self.manager.handle(),
            csi: self.csi.drivers(),
        };
        let admin = crate::admin::serve(
            self.config.root_dir.clone(),
            sources,
            SystemTime::now(),
            shutdown.clone(),
        );
        let manager = self.manager.run(shutdown.clone());
        let (managed, served) = tokio::join!(
            async {
                let result = manager.await;
                shutdown.cancel();
                result
            },
            async {
                let result = admin.await;
                if result.is_err() {
                    shutdown.cancel();
                }
                result
            }
        );
        managed?;
        served?;
        Ok(())
    }
}

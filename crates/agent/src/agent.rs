//! The node agent `nodeplugins run` starts: the plugin manager on
//! `<root>/plugins_registry` with the CSI, device plugin and DRA handlers,
//! `kubelet.sock`, and the admin socket.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeplugins_api::constants::{layout, plugin_type};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::admin::{AdminMetrics, AdminParts};
use crate::common::root_lock::RootLock;
pub use crate::common::root_lock::RootLockError;
use crate::csi::{CsiDriverStore, CsiHandler, NODE_GET_INFO_TIMEOUT};
use crate::device::{
    DeviceHandle, DeviceManager, DeviceManagerConfig, DeviceManagerError, DevicePluginHandler,
};
use crate::dra::{
    DraHandle, DraManager, DraManagerConfig, DraPluginHandler, DriverCleanup, LoggingCleanup,
};
use crate::fs_watch::FsWatcher;
use crate::metrics::{MetricsEndpoint, serve_metrics};
use crate::plugin_manager::handler::PluginHandler;
use crate::plugin_manager::{PluginManager, PluginManagerConfig, PluginManagerHandle, WatchError};
use crate::pod_resources::{PodResourcesConfig, PodResourcesMetrics};

/// Settings of the agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The kubelet-style root directory (`/var/lib/kubelet` by default).
    pub root_dir: PathBuf,
    /// Plugin manager settings; its `dir` is `<root>/plugins_registry`.
    pub plugins: PluginManagerConfig,
    /// Timeout of CSI NodeGetInfo calls.
    pub csi_timeout: Duration,
    /// Device manager settings; its `dir` is `<root>/device-plugins`.
    pub devices: DeviceManagerConfig,
    /// DRA manager settings.
    pub dra: DraManagerConfig,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`; `None` for nowhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The pod-resources API; `None` to not serve it.
    pub pod_resources: Option<PodResourcesConfig>,
    /// The one inotify instance of the agent's waits on files; [`new`](Self::new)
    /// gives the same one to the device and DRA managers and the
    /// pod-resources server, and the agent to the admin socket and the API
    /// credentials.
    pub fs_watcher: FsWatcher,
    /// The container runtime the node's pods run on (the kubelet's
    /// `--container-runtime-endpoint`, `unix:///run/containerd/containerd.sock`);
    /// `None`: the simulated runtime, which runs nothing
    /// ([`crate::runtime::SimulatedRuntime`]). Default: `None`.
    pub container_runtime_endpoint: Option<String>,
    /// Where a real runtime writes the pods' container logs (the kubelet's
    /// `podLogsDir`). Default: `/var/log/pods`.
    pub pod_logs_dir: PathBuf,
    /// The runtime calls' metrics (`kubelet_runtime_operations_*`).
    pub runtime_metrics: crate::runtime::RuntimeMetrics,
    /// The kubelet's HTTPS API (logs, exec, attach, port-forward), served
    /// when the agent has an API server; `None`: not served (the default).
    /// A registered Node names its port as the kubelet endpoint's.
    #[cfg(feature = "kubelet-server")]
    pub kubelet_server: Option<crate::kubelet_server::KubeletServerConfig>,
}

/// The default metrics address: loopback only.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:10261";

impl AgentConfig {
    /// Upstream defaults under `root_dir`.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        let root_dir = root_dir.into();
        let fs_watcher = FsWatcher::new();
        let pod_resources = PodResourcesConfig {
            fs_watcher: fs_watcher.clone(),
            ..PodResourcesConfig::new(&root_dir)
        };
        let plugins = PluginManagerConfig::new(root_dir.join(layout::PLUGINS_REGISTRY_DIR));
        let devices = DeviceManagerConfig {
            fs_watcher: fs_watcher.clone(),
            ..DeviceManagerConfig::new(root_dir.join(layout::DEVICE_PLUGINS_DIR))
        };
        let dra = DraManagerConfig {
            state_dir: Some(root_dir.join(crate::admin::ADMIN_DIR)),
            fs_watcher: fs_watcher.clone(),
            ..DraManagerConfig::default()
        };
        Self {
            root_dir,
            plugins,
            csi_timeout: NODE_GET_INFO_TIMEOUT,
            devices,
            dra,
            metrics_addr: None,
            pod_resources: Some(pod_resources),
            fs_watcher,
            container_runtime_endpoint: None,
            pod_logs_dir: PathBuf::from(crate::runtime::POD_LOGS_DIR),
            runtime_metrics: crate::runtime::RuntimeMetrics::default(),
            #[cfg(feature = "kubelet-server")]
            kubelet_server: None,
        }
    }
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The root directory could not be created.
    #[error("root directory {dir:?}: {source}")]
    RootDir {
        /// The root directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another agent uses the root directory, or it could not be locked.
    #[error(transparent)]
    Lock(#[from] RootLockError),
    /// The plugin registry could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The device manager could not start (its directory or `kubelet.sock`).
    #[error(transparent)]
    Devices(#[from] DeviceManagerError),
    /// The admin socket could not be served.
    #[error("admin socket: {0}")]
    Admin(#[source] nodeplugins_api::transport::TransportError),
    /// The pod-resources socket could not be served.
    #[error("pod-resources socket: {0}")]
    PodResources(#[source] nodeplugins_api::transport::TransportError),
    /// The Kubernetes API may not be written as this node (the credentials
    /// are another node's).
    #[cfg(feature = "kube")]
    #[error(transparent)]
    Kube(crate::kube_api::KubeApiError),
    /// A part of the agent panicked (a bug); the others were stopped.
    #[error("agent task failed: {0}")]
    Part(#[source] tokio::task::JoinError),
    /// The container runtime endpoint is not usable.
    #[error("container runtime: {0}")]
    Runtime(#[source] crate::runtime::RuntimeError),
    /// The kubelet's API could not be served.
    #[cfg(feature = "kubelet-server")]
    #[error(transparent)]
    KubeletServer(crate::kubelet_server::KubeletServerError),
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
    plugins: PluginManager,
    plugins_handle: PluginManagerHandle,
    csi: Arc<CsiHandler>,
    devices: DeviceManager,
    devices_handle: DeviceHandle,
    dra: DraManager,
    dra_handle: DraHandle,
    /// Publishes to the Kubernetes API, when the agent has one.
    #[cfg(feature = "kube")]
    kube: Option<(crate::kube_api::KubeApi, crate::kube_api::KubeApiHandle)>,
    /// Serves the node's pods, when the agent has an API server.
    #[cfg(feature = "kube")]
    pods: Option<(crate::pods::PodsManager, crate::pods::PodsHandle)>,
    /// The runtime the pods run on, when the agent has an API server.
    #[cfg(feature = "kube")]
    runtime: Option<Arc<dyn crate::runtime::ContainerRuntime>>,
    /// Stops the pods before the node shuts down, when configured.
    #[cfg(feature = "kube")]
    node_shutdown: Option<crate::node_shutdown::NodeShutdownManager>,
}

/// The parts every agent has before its DRA manager, which needs to know
/// how a driver's leftovers are cleaned up.
struct Parts {
    plugins: (PluginManager, PluginManagerHandle),
    csi: Arc<CsiHandler>,
    devices: (DeviceManager, DeviceHandle),
}

impl Parts {
    fn new(config: &AgentConfig) -> Self {
        let (plugins, plugins_handle) = PluginManager::new(config.plugins.clone());
        let csi = Arc::new(CsiHandler::new(config.csi_timeout));
        plugins.add_handler(plugin_type::CSI, csi.clone());
        let (devices, devices_handle) = DeviceManager::new(config.devices.clone());
        plugins.add_handler(
            plugin_type::DEVICE,
            Arc::new(DevicePluginHandler::new(devices_handle.clone())),
        );
        Self {
            plugins: (plugins, plugins_handle),
            csi,
            devices: (devices, devices_handle),
        }
    }

    fn with_dra(self, config: AgentConfig, cleanup: Arc<dyn DriverCleanup>) -> Agent {
        let (dra, dra_handle) = DraManager::new(config.dra.clone(), cleanup);
        let (plugins, plugins_handle) = self.plugins;
        plugins.add_handler(
            plugin_type::DRA,
            Arc::new(DraPluginHandler::new(dra_handle.clone())),
        );
        let (devices, devices_handle) = self.devices;
        Agent {
            config,
            plugins,
            plugins_handle,
            csi: self.csi,
            devices,
            devices_handle,
            dra,
            dra_handle,
            #[cfg(feature = "kube")]
            kube: None,
            #[cfg(feature = "kube")]
            pods: None,
            #[cfg(feature = "kube")]
            runtime: None,
            #[cfg(feature = "kube")]
            node_shutdown: None,
        }
    }
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
        Parts::new(&config).with_dra(config, cleanup)
    }

    /// An agent that publishes to the Kubernetes API `kube` names, as the
    /// kubelet does: device resources in the Node's status, CSI drivers on
    /// the Node and its CSINode, and the node's ResourceSlices withdrawn at
    /// start and when a DRA driver stays away; and that serves the pods
    /// bound to the node (unless `kube.serve_pods` is off): their devices
    /// allocated and claims prepared when they come, given back when they
    /// go. Fails when the configuration or the credentials cannot be read.
    #[cfg(feature = "kube")]
    pub async fn with_kube_api(
        config: AgentConfig,
        kube: crate::kube_api::KubeApiConfig,
    ) -> Result<Self, AgentError> {
        let parts = Parts::new(&config);
        let mut pods_config = crate::pods::PodsConfig::new(&kube);
        pods_config.fs_watcher = config.fs_watcher.clone();
        let state_dir = config.root_dir.join(crate::admin::ADMIN_DIR);
        pods_config.boot_record = Some(state_dir.join(crate::pods::BOOT_RECORD_FILE));
        let runtime: Arc<dyn crate::runtime::ContainerRuntime> =
            match &config.container_runtime_endpoint {
                Some(endpoint) => {
                    pods_config.pod_logs_dir = Some(config.pod_logs_dir.clone());
                    pods_config.pods_dir = Some(config.root_dir.join("pods"));
                    Arc::new(
                        crate::runtime::CriRuntime::new(
                            endpoint,
                            crate::runtime::RUNTIME_REQUEST_TIMEOUT,
                            config.runtime_metrics.clone(),
                        )
                        .map_err(AgentError::Runtime)?,
                    )
                }
                // Its records outlive the agent, as a real runtime does.
                None => Arc::new(crate::runtime::SimulatedRuntime::persistent(
                    state_dir.join(crate::pods::SIMULATED_RUNTIME_FILE),
                    &crate::pods::current_boot_id(),
                )),
            };
        #[allow(unused_mut)]
        let mut kube = crate::kube_api::KubeApiConfig {
            fs_watcher: config.fs_watcher.clone(),
            ..kube
        };
        // The Node names the port the API server reaches the kubelet's
        // API on.
        #[cfg(feature = "kubelet-server")]
        if let (Some(server), Some(registration)) =
            (&config.kubelet_server, kube.node_registration.as_mut())
            && server.addr.port() != 0
        {
            registration.kubelet_port = server.addr.port();
        }
        let kube_serves_pods = kube.serve_pods;
        let node_shutdown = kube.node_shutdown.clone();
        let (publisher, handle) =
            crate::kube_api::KubeApi::connect(kube, parts.devices.1.clone(), parts.csi.drivers())
                .await
                .map_err(AgentError::Kube)?;
        let mut publisher = publisher.with_runtime(runtime.clone());
        let mut agent = parts.with_dra(config, Arc::new(handle.slice_cleanup()));
        let pods = crate::pods::PodsManager::new(
            pods_config,
            agent.devices_handle.clone(),
            agent.dra_handle.clone(),
            agent.csi.drivers(),
            runtime.clone(),
            &handle,
        );
        if kube_serves_pods
            && let Some(manager) = node_shutdown
                .and_then(|c| crate::node_shutdown::NodeShutdownManager::new(c, pods.1.clone()))
        {
            publisher = publisher.with_node_shutdown(manager.shutting_down());
            agent.node_shutdown = Some(manager);
        }
        agent.pods = Some(pods);
        agent.runtime = Some(runtime);
        agent.kube = Some((publisher, handle));
        Ok(agent)
    }

    /// The pods owner, when the agent has an API server.
    #[cfg(feature = "kube")]
    pub fn pods(&self) -> Option<crate::pods::PodsHandle> {
        self.pods.as_ref().map(|(_, handle)| handle.clone())
    }

    /// The DRA manager.
    pub fn dra(&self) -> DraHandle {
        self.dra_handle.clone()
    }

    /// The device manager.
    pub fn devices(&self) -> DeviceHandle {
        self.devices_handle.clone()
    }

    /// The registered CSI drivers.
    pub fn csi_drivers(&self) -> CsiDriverStore {
        self.csi.drivers()
    }

    /// Routes plugins of `plugin_type` to `handler` (replacing a built-in one).
    pub fn add_handler(&self, plugin_type: impl Into<String>, handler: Arc<dyn PluginHandler>) {
        self.plugins.add_handler(plugin_type, handler);
    }

    /// Status and events of the plugin manager.
    pub fn plugins(&self) -> PluginManagerHandle {
        self.plugins_handle.clone()
    }

    /// Runs until `shutdown` is cancelled or a part fails.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), AgentError> {
        let root = self.config.root_dir.clone();
        std::fs::create_dir_all(&root).map_err(|source| AgentError::RootDir {
            dir: root.clone(),
            source,
        })?;
        // Before anything under the root is touched: a second agent must
        // change nothing of the first one's.
        let _lock = RootLock::acquire(&root)?;
        let plugins = self.plugins_handle.clone();
        let devices = self.devices_handle.clone();
        let dra = self.dra_handle.clone();
        let admin_metrics = AdminMetrics::default();
        let pod_resources_metrics = PodResourcesMetrics::default();
        #[cfg(feature = "kube")]
        let kube = self.kube.as_ref().map(|(_, handle)| handle.clone());
        #[cfg(feature = "kube")]
        let pods_handle = self.pods.as_ref().map(|(_, handle)| handle.clone());
        // What the agent's metrics endpoint and the kubelet's `/metrics`
        // serve.
        #[allow(unused_mut)]
        let mut metric_sources: Vec<Arc<dyn crate::metrics::MetricsSource>> = vec![
            Arc::new(plugins.clone()),
            Arc::new(devices.metrics().clone()),
            Arc::new(dra.metrics().clone()),
            Arc::new(admin_metrics.clone()),
            Arc::new(pod_resources_metrics.clone()),
            Arc::new(self.config.runtime_metrics.clone()),
        ];
        #[cfg(feature = "kube")]
        if let Some(kube) = &kube {
            metric_sources.push(Arc::new(kube.metrics().clone()));
        }
        #[cfg(feature = "kube")]
        if let Some(pods) = &pods_handle {
            metric_sources.push(Arc::new(pods.lifecycle_metrics().clone()));
        }
        #[cfg(feature = "kube")]
        if let Some(stats) = pods_handle.as_ref().and_then(|p| p.volume_stats()) {
            metric_sources.push(Arc::new(stats));
        }
        #[cfg(feature = "kube")]
        if let Some(operations) = pods_handle.as_ref().and_then(|p| p.csi_operations()) {
            metric_sources.push(Arc::new(operations));
        }
        #[cfg(feature = "kube")]
        if let Some(states) = pods_handle
            .as_ref()
            .and_then(|p| p.pod_certificate_states())
        {
            metric_sources.push(Arc::new(states));
        }
        let (metrics_addr, metrics) = match self.config.metrics_addr {
            Some(addr) => {
                let sources = metric_sources.clone();
                let endpoint = MetricsEndpoint {
                    sources,
                    readiness: vec![Arc::new(plugins.clone()), Arc::new(devices.clone())],
                };
                let (bound, serving) = serve_metrics(addr, endpoint, shutdown.clone())
                    .await
                    .map_err(|source| AgentError::Metrics { addr, source })?;
                tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
                (Some(bound), Some(serving))
            }
            None => (None, None),
        };
        let sources = AdminParts {
            plugins,
            csi: self.csi.drivers(),
            devices,
            dra,
            metrics_addr,
            admin: admin_metrics,
            pod_resources_socket: self.config.pod_resources.as_ref().map(|c| c.socket.clone()),
            pod_resources: pod_resources_metrics.clone(),
            #[cfg(feature = "kube")]
            pods: pods_handle.clone(),
            #[cfg(feature = "kube")]
            kube,
        };
        #[cfg(feature = "kube")]
        let pods_view = pods_handle
            .as_ref()
            .filter(|p| p.serving())
            .map(crate::pods::PodsHandle::subscribe);
        #[cfg(not(feature = "kube"))]
        let pods_view = None;
        #[cfg(feature = "kubelet-server")]
        let kubelet_server = match (
            self.config.kubelet_server.clone(),
            &pods_handle,
            self.kube.as_ref().map(|(_, handle)| handle),
            &self.runtime,
        ) {
            (Some(config), Some(pods), Some(kube), Some(runtime)) => {
                let parts = crate::kubelet_server::ServerParts {
                    node_name: kube.node_name().to_string(),
                    pods: pods.clone(),
                    runtime: runtime.clone(),
                    connection: kube.connection(),
                    fs_watcher: self.config.fs_watcher.clone(),
                    metrics: metric_sources.clone(),
                };
                let server = crate::kubelet_server::KubeletServer::bind(config, parts)
                    .await
                    .map_err(AgentError::KubeletServer)?;
                if let Ok(addr) = server.local_addr() {
                    tracing::info!(%addr, "serving the kubelet's API");
                }
                if let Some(Ok(addr)) = server.read_only_addr() {
                    tracing::info!(%addr, "serving the kubelet's read-only port");
                }
                Some(server)
            }
            (Some(config), ..) => {
                tracing::warn!(
                    addr = %config.addr,
                    "the kubelet's API is not served: it needs the API server, pods served and a container runtime"
                );
                None
            }
            _ => None,
        };
        #[cfg(feature = "kube")]
        let serving = {
            let shutdown = shutdown.clone();
            let pods = self.pods.map(|(manager, _)| manager);
            let node_shutdown = self.node_shutdown;
            #[cfg(feature = "kubelet-server")]
            let api = {
                let shutdown = shutdown.clone();
                async move {
                    if let Some(server) = kubelet_server {
                        server.serve(shutdown).await;
                    }
                }
            };
            #[cfg(not(feature = "kubelet-server"))]
            let api = async {};
            async move {
                let pods = async {
                    if let Some(pods) = pods {
                        pods.run(shutdown.clone()).await;
                    }
                };
                let node_shutdown = async {
                    if let Some(manager) = node_shutdown {
                        manager.run(shutdown.clone()).await;
                    }
                };
                tokio::join!(pods, api, node_shutdown);
                shutdown.cancelled().await;
            }
        };
        #[cfg(not(feature = "kube"))]
        let serving = {
            let shutdown = shutdown.clone();
            async move { shutdown.cancelled().await }
        };
        #[cfg(feature = "kube")]
        let publishing = {
            let shutdown = shutdown.clone();
            let kube = self.kube.map(|(publisher, _)| publisher);
            async move {
                match kube {
                    Some(kube) => kube.run(shutdown).await.map_err(AgentError::Kube),
                    None => Ok(()),
                }
            }
        };
        #[cfg(not(feature = "kube"))]
        let publishing = async { Ok::<(), AgentError>(()) };
        let fs_watcher = self.config.fs_watcher.clone();
        let watcher = fs_watcher.clone();
        let admin =
            crate::admin::serve(root, sources, watcher, SystemTime::now(), shutdown.clone());
        let pod_resources = {
            let (devices, dra) = (self.devices_handle.clone(), self.dra_handle.clone());
            let config = self.config.pod_resources.clone();
            let shutdown = shutdown.clone();
            async move {
                match config {
                    Some(config) => {
                        crate::pod_resources::serve(
                            config,
                            devices,
                            dra,
                            pods_view,
                            pod_resources_metrics,
                            shutdown,
                        )
                        .await
                    }
                    None => {
                        // Not served: ending here would stop the agent.
                        shutdown.cancelled().await;
                        Ok(())
                    }
                }
            }
        };
        // Each part is a task of its own, woken only by what it waits for.
        let managed = part(self.plugins.run(shutdown.clone()), &shutdown);
        let served = part(admin, &shutdown);
        let devices = part(self.devices.run(shutdown.clone()), &shutdown);
        let dra = part(self.dra.run(shutdown.clone()), &shutdown);
        // These two end early when not configured, which stops nothing.
        let stopped = shutdown.clone();
        let metrics = part(
            async move {
                if let Some(metrics) = metrics {
                    metrics.await;
                }
                stopped.cancelled().await;
            },
            &shutdown,
        );
        let stopped = shutdown.clone();
        let publishing = part(
            async move {
                publishing.await?;
                stopped.cancelled().await;
                Ok::<(), AgentError>(())
            },
            &shutdown,
        );
        let pod_resources = part(pod_resources, &shutdown);
        let serving = part(serving, &shutdown);
        let (managed, served, devices, dra, metrics, publishing, pod_resources, serving) = tokio::join!(
            managed,
            served,
            devices,
            dra,
            metrics,
            publishing,
            pod_resources,
            serving
        );
        // Every wait on a file ended with its part: the watcher's reader did.
        fs_watcher.stopped().await;
        managed??;
        served?.map_err(AgentError::Admin)?;
        pod_resources?.map_err(AgentError::PodResources)?;
        devices??;
        dra?;
        metrics?;
        publishing??;
        serving?;
        Ok(())
    }
}

/// Runs one part of the agent as a task of its own; when it ends (normally
/// only at shutdown, or because it failed) the others are told to stop too.
/// A part that panics is reported as such, after the others stopped; one
/// whose caller goes away (the agent's future dropped) is aborted.
async fn part<T: Send + 'static>(
    part: impl Future<Output = T> + Send + 'static,
    shutdown: &CancellationToken,
) -> Result<T, AgentError> {
    let stop = shutdown.clone();
    let task = AbortOnDropHandle::new(tokio::spawn(async move {
        let result = part.await;
        stop.cancel();
        result
    }));
    task.await.map_err(|e| {
        shutdown.cancel();
        AgentError::Part(e)
    })
}

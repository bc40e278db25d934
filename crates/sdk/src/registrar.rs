//! Serving `pluginregistration.Registration` for one plugin.
//!
//! The registrar listens on `<registry dir>/<name>-reg.sock` (or a name of
//! your choosing, or a per-instance name for rolling updates) through the
//! nodeplugins transport, so the real kubelet, which dials the socket with a
//! path-valued `:authority`, can reach it. It answers GetInfo with the
//! plugin's description and reports every NotifyRegistrationStatus on a
//! watch channel; what to do when rejected is the plugin's decision.

use std::path::{Path, PathBuf};

use nodeplugins_api::constants::layout::{DEFAULT_ROOT_DIR, PLUGINS_REGISTRY_DIR};
use nodeplugins_api::pluginregistration::v1 as reg;
use nodeplugins_api::transport::{BoundSocket, TransportError, serve};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::socket_name::{NameTooLong, registration_socket_name, rolling_update_socket_name};

/// What the plugin tells the kubelet about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRegistration {
    /// `CSIPlugin`, `DevicePlugin`, `DRAPlugin`, or another type the node agent knows.
    pub plugin_type: String,
    /// Unique per type: driver or resource name.
    pub name: String,
    /// The plugin's service socket; empty means the registration socket itself.
    pub endpoint: String,
    /// Supported versions (CSI, device plugin) or gRPC service names (DRA).
    pub versions: Vec<String>,
}

/// Where registration stands, as the kubelet last said.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrationState {
    /// Serving; the kubelet has not answered yet.
    Pending,
    /// The kubelet accepted the plugin.
    Registered,
    /// The kubelet rejected the plugin, saying why. It will retry with backoff;
    /// node-driver-registrar exits at this point, a plugin may also wait.
    Rejected(String),
}

/// Why the registrar could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistrarError {
    /// A socket name and a rolling-update instance were both given.
    #[error("a socket name and a rolling-update instance id are mutually exclusive")]
    ConflictingNames,
    /// No rolling-update name fits.
    #[error(transparent)]
    NameTooLong(#[from] NameTooLong),
    /// The socket could not be served.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Configures a [`Registrar`].
#[derive(Debug, Clone)]
pub struct RegistrarBuilder {
    info: PluginRegistration,
    registry_dir: PathBuf,
    socket_name: Option<String>,
    instance: Option<String>,
    mode: Option<u32>,
}

impl RegistrarBuilder {
    /// The directory the kubelet watches (default `/var/lib/kubelet/plugins_registry`).
    pub fn registry_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.registry_dir = dir.into();
        self
    }

    /// A socket file name instead of `<name>-reg.sock`.
    pub fn socket_name(mut self, name: impl Into<String>) -> Self {
        self.socket_name = Some(name.into());
        self
    }

    /// Enables rolling updates: a per-instance socket name derived from `id`
    /// (such as the pod UID). See [`rolling_update_socket_name`].
    pub fn rolling_update(mut self, id: impl Into<String>) -> Self {
        self.instance = Some(id.into());
        self
    }

    /// Permission bits of the socket (node-driver-registrar uses 0700).
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The socket path this configuration serves on.
    pub fn socket_path(&self) -> Result<PathBuf, RegistrarError> {
        let file = match (&self.socket_name, &self.instance) {
            (Some(_), Some(_)) => return Err(RegistrarError::ConflictingNames),
            (Some(name), None) => name.clone(),
            (None, Some(id)) => {
                rolling_update_socket_name(&self.registry_dir, &self.info.name, id)?
            }
            (None, None) => registration_socket_name(&self.info.name),
        };
        Ok(self.registry_dir.join(file))
    }

    /// Starts serving. A stale socket of the same name (one nobody answers on)
    /// is removed first; the socket is removed again when `shutdown` fires.
    pub async fn start(self, shutdown: CancellationToken) -> Result<Registrar, RegistrarError> {
        let path = self.socket_path()?;
        let socket = BoundSocket::bind(&path, self.mode).await?;
        let (state_tx, state_rx) = watch::channel(RegistrationState::Pending);
        let service = Service {
            info: self.info,
            state: state_tx,
        };
        let router = crate::call_span::server(path.display())
            .add_service(reg::registration_server::RegistrationServer::new(service));
        tracing::info!(socket = %path.display(), "registration socket listening");
        let task = tokio::spawn(serve(socket, router, shutdown.clone()));
        Ok(Registrar {
            path,
            state: state_rx,
            shutdown,
            task,
        })
    }
}

#[derive(Clone)]
struct Service {
    info: PluginRegistration,
    state: watch::Sender<RegistrationState>,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Service {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: self.info.plugin_type.clone(),
            name: self.info.name.clone(),
            endpoint: self.info.endpoint.clone(),
            supported_versions: self.info.versions.clone(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        let state = if status.plugin_registered {
            tracing::info!(name = %self.info.name, "registered with the kubelet");
            RegistrationState::Registered
        } else {
            tracing::warn!(name = %self.info.name, error = %status.error, "registration rejected by the kubelet");
            RegistrationState::Rejected(status.error)
        };
        self.state.send_replace(state);
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// A serving registration socket.
pub struct Registrar {
    path: PathBuf,
    state: watch::Receiver<RegistrationState>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), TransportError>>,
}

impl Registrar {
    /// A registrar for `info` with the defaults: `/var/lib/kubelet/plugins_registry/<name>-reg.sock`.
    pub fn builder(info: PluginRegistration) -> RegistrarBuilder {
        RegistrarBuilder {
            info,
            registry_dir: Path::new(DEFAULT_ROOT_DIR).join(PLUGINS_REGISTRY_DIR),
            socket_name: None,
            instance: None,
            mode: None,
        }
    }

    /// The registration socket.
    pub fn socket(&self) -> &Path {
        &self.path
    }

    /// The registration state; changes whenever the kubelet notifies.
    pub fn state(&self) -> watch::Receiver<RegistrationState> {
        self.state.clone()
    }

    /// Waits until the server stops (after the shutdown token fired) and the
    /// socket is removed.
    pub async fn wait(self) -> Result<(), TransportError> {
        match self.task.await {
            Ok(result) => result,
            Err(source) => Err(TransportError::Task {
                path: self.path,
                source,
            }),
        }
    }

    /// Stops serving and removes the socket.
    pub async fn stop(self) -> Result<(), TransportError> {
        self.shutdown.cancel();
        self.wait().await
    }
}

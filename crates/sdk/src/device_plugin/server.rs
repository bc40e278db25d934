//! Serving and registering a device plugin, again whenever the kubelet
//! restarts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use inotify::{EventMask, Inotify, WatchMask};
use nodeplugins_api::constants::device_plugin::VERSION;
use nodeplugins_api::constants::layout::{
    DEFAULT_ROOT_DIR, DEVICE_PLUGINS_DIR, KUBELET_SOCKET, PLUGINS_REGISTRY_DIR,
};
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::{BoundSocket, serve};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::cdi::{DeviceCdi, keep_written};
use super::devices::Devices;
use super::error::DevicePluginError;
use super::grpc::{Server, options};
use super::kubelet::register_with_kubelet;
use super::registration::Registration;
use super::service::DevicePluginService;
use crate::registrar::{PluginRegistration, Registrar, RegistrationState};

/// Settings of a [`DevicePluginServer`], ending in [`start`](Self::start).
pub struct DevicePluginBuilder {
    pub(super) resource: String,
    pub(super) service: Arc<dyn DevicePluginService>,
    pub(super) devices: Devices,
    pub(super) dir: PathBuf,
    pub(super) socket_name: String,
    pub(super) registration: Registration,
    /// The kind of the CDI spec to write, if any.
    pub(super) cdi_kind: Option<String>,
    /// Where the CDI spec goes.
    pub(super) cdi_dir: PathBuf,
}

impl DevicePluginBuilder {
    /// The kubelet root directory (default `/var/lib/kubelet`): serves in
    /// `<root>/device-plugins`.
    pub fn root_dir(mut self, root: impl AsRef<Path>) -> Self {
        self.dir = root.as_ref().join(DEVICE_PLUGINS_DIR);
        self
    }

    /// The device plugin directory, if not `<root>/device-plugins`.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    /// The plugin's socket file name in the directory (default: the
    /// resource name with `/` as `_`, and `.sock`).
    pub fn socket_name(mut self, name: impl Into<String>) -> Self {
        self.socket_name = name.into();
        self
    }

    /// How to register (default: through `kubelet.sock`).
    pub fn registration(mut self, registration: Registration) -> Self {
        self.registration = registration;
        self
    }

    /// Register through a socket in `<root>/plugins_registry` instead of
    /// `kubelet.sock`.
    pub fn register_in_registry(self, root: impl AsRef<Path>) -> Self {
        let dir = root.as_ref().join(PLUGINS_REGISTRY_DIR);
        self.registration(Registration::Registry(dir))
    }

    /// Writes a CDI spec of kind `kind` (`vendor/class`, such as the
    /// resource name `example.com/gpu`) in `/var/run/cdi` (see
    /// [`cdi_dir`](Self::cdi_dir)) for every device that
    /// [`DevicePluginService::container_edits`] gives edits, before serving
    /// and again whenever the device list changes, and names those CDI
    /// devices (`kind=<id>`) in each Allocate answer.
    pub fn cdi(mut self, kind: impl Into<String>) -> Self {
        self.cdi_kind = Some(kind.into());
        self
    }

    /// The directory of the CDI spec [`cdi`](Self::cdi) writes, if not
    /// `/var/run/cdi` (one the container runtime reads).
    pub fn cdi_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cdi_dir = dir.into();
        self
    }

    /// The devices to report (default: none until set through the handle).
    pub fn devices(mut self, devices: Devices) -> Self {
        self.devices = devices;
        self
    }

    /// The plugin's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(&self.socket_name)
    }

    /// Serves and registers until `shutdown`, binding and registering again
    /// whenever the kubelet restarts. Returns once the plugin serves: the
    /// directory is watched and the socket bound, answering calls; the
    /// registration goes on in the background, and
    /// [`DevicePluginServer::registration`] tells where it stands.
    pub async fn start(
        self,
        shutdown: CancellationToken,
    ) -> Result<DevicePluginServer, DevicePluginError> {
        let watch_error = |source| DevicePluginError::Watch {
            dir: self.dir.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(watch_error)?;
        let inotify = Inotify::init().map_err(watch_error)?;
        inotify
            .watches()
            .add(
                &self.dir,
                WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE,
            )
            .map_err(watch_error)?;
        let events = inotify
            .into_event_stream([0u8; 4096])
            .map_err(watch_error)?;
        // The spec is there before any Allocate can name its devices.
        let cdi = match &self.cdi_kind {
            Some(kind) => {
                let cdi = DeviceCdi::new(&self.cdi_dir, kind);
                cdi.write(self.service.as_ref(), &self.devices.get())
                    .map_err(|source| DevicePluginError::Cdi {
                        path: cdi.path().to_owned(),
                        source,
                    })?;
                tokio::spawn(keep_written(
                    cdi.clone(),
                    self.service.clone(),
                    self.devices.clone(),
                    shutdown.clone(),
                ));
                Some(cdi)
            }
            None => None,
        };
        let socket = self.socket();
        let first = BoundSocket::bind(&socket, None).await?;
        let devices = self.devices.clone();
        let (state, registration) = watch::channel(RegistrationState::Pending);
        let task = tokio::spawn(self.serve(events, first, state, cdi, shutdown));
        Ok(DevicePluginServer {
            socket,
            devices,
            registration,
            task,
        })
    }

    async fn serve(
        self,
        mut events: inotify::EventStream<[u8; 4096]>,
        first: BoundSocket,
        state: watch::Sender<RegistrationState>,
        cdi: Option<DeviceCdi>,
        shutdown: CancellationToken,
    ) -> Result<(), DevicePluginError> {
        let mut first = Some(first);
        loop {
            let round = shutdown.child_token();
            let socket = self.socket();
            let bound = match first.take() {
                Some(bound) => bound,
                None => BoundSocket::bind(&socket, None).await?,
            };
            state.send_replace(RegistrationState::Pending);
            // The file as bound, not as it is now: the kubelet's start-up
            // cleanup may already have removed it.
            let bound_identity = Some(bound.identity());
            let router = crate::call_span::server(socket.display()).add_service(
                dp::device_plugin_server::DevicePluginServer::new(Server {
                    service: self.service.clone(),
                    devices: self.devices.clone(),
                    cdi: cdi.clone(),
                }),
            );
            let server = tokio::spawn(serve(bound, router, round.clone()));
            // Registration through kubelet.sock retries while events are
            // watched: the kubelet's start-up cleanup may delete the socket
            // just bound, and retrying against a deleted socket would never
            // succeed.
            let kubelet_registration = register_with_kubelet(
                &self.dir,
                &self.socket_name,
                &self.resource,
                options(self.service.as_ref()),
                &state,
                &round,
            );
            tokio::pin!(kubelet_registration);
            let mut registered = !matches!(self.registration, Registration::KubeletSocket);
            let registrar = match &self.registration {
                Registration::KubeletSocket => None,
                Registration::Registry(dir) => Some({
                    std::fs::create_dir_all(dir).map_err(|source| DevicePluginError::Watch {
                        dir: dir.clone(),
                        source,
                    })?;
                    Registrar::builder(PluginRegistration {
                        plugin_type: nodeplugins_api::constants::plugin_type::DEVICE.into(),
                        name: self.resource.clone(),
                        endpoint: socket.display().to_string(),
                        versions: vec![VERSION.into()],
                    })
                    .registry_dir(dir)
                    .start(round.clone())
                    .await?
                }),
            };
            if let Some(registrar) = &registrar {
                tokio::spawn(follow(registrar.state(), state.clone(), round.clone()));
            }
            let end = loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => break RoundEnd::Shutdown,
                    () = &mut kubelet_registration, if !registered => {
                        registered = true;
                        continue;
                    }
                    event = events.next() => event,
                };
                let Some(Ok(event)) = event else {
                    break RoundEnd::Shutdown;
                };
                let name = event
                    .name
                    .as_deref()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                let kubelet_back = name == KUBELET_SOCKET
                    && event
                        .mask
                        .intersects(EventMask::CREATE | EventMask::MOVED_TO);
                // Our own earlier rounds delete their sockets too: only a
                // missing or different file at our path means someone removed
                // this one.
                let ours_gone = name == self.socket_name
                    && event.mask.contains(EventMask::DELETE)
                    && file_identity(&socket) != bound_identity;
                if kubelet_back || ours_gone {
                    tracing::info!(resource = %self.resource, kubelet_back, ours_gone, "the kubelet restarted; registering again");
                    break RoundEnd::KubeletRestarted;
                }
            };
            round.cancel();
            let _ = server.await;
            if let Some(registrar) = registrar {
                let _ = registrar.wait().await;
            }
            if matches!(end, RoundEnd::Shutdown) {
                return Ok(());
            }
        }
    }
}

/// Copies the registrar's state to the plugin's until the round ends.
async fn follow(
    mut from: watch::Receiver<RegistrationState>,
    to: watch::Sender<RegistrationState>,
    round: CancellationToken,
) {
    loop {
        let now = from.borrow_and_update().clone();
        to.send_replace(now);
        tokio::select! {
            () = round.cancelled() => return,
            changed = from.changed() => if changed.is_err() { return },
        }
    }
}

/// Why a serving round ended.
enum RoundEnd {
    Shutdown,
    KubeletRestarted,
}

/// A serving device plugin.
pub struct DevicePluginServer {
    socket: PathBuf,
    devices: Devices,
    registration: watch::Receiver<RegistrationState>,
    task: JoinHandle<Result<(), DevicePluginError>>,
}

impl DevicePluginServer {
    /// A plugin for `resource` served by `service`, with the defaults
    /// (`/var/lib/kubelet/device-plugins`, registration through
    /// `kubelet.sock`); set what differs, then
    /// [`start`](DevicePluginBuilder::start) it.
    pub fn builder(
        resource: impl Into<String>,
        service: impl DevicePluginService,
    ) -> DevicePluginBuilder {
        let resource = resource.into();
        DevicePluginBuilder {
            socket_name: format!("{}.sock", resource.replace('/', "_")),
            resource,
            service: Arc::new(service),
            devices: Devices::new(Vec::new()),
            dir: Path::new(DEFAULT_ROOT_DIR).join(DEVICE_PLUGINS_DIR),
            registration: Registration::KubeletSocket,
            cdi_kind: None,
            cdi_dir: PathBuf::from(crate::cdi::DEFAULT_CDI_DIR),
        }
    }

    /// The plugin's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The device list; every change goes out on ListAndWatch.
    pub fn devices(&self) -> &Devices {
        &self.devices
    }

    /// Where the registration stands, as the kubelet last answered: pending
    /// (again after each kubelet restart), registered, or rejected with
    /// the kubelet's reason. A rejected plugin is still retried; one that
    /// would rather stop (as node-driver-registrar does) watches this and
    /// stops.
    pub fn registration(&self) -> watch::Receiver<RegistrationState> {
        self.registration.clone()
    }

    /// Waits until the plugin stops (after shutdown) and its socket is removed.
    pub async fn wait(self) -> Result<(), DevicePluginError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(DevicePluginError::Panicked(e)),
        }
    }
}

/// Device and inode of the file at `path`, if any.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

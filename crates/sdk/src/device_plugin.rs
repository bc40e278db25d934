//! Serving a device plugin: `v1beta1.DevicePlugin` on a socket in the device
//! plugin directory, registered through `kubelet.sock` (or `plugins_registry`).
//!
//! The author implements [`DevicePluginService`] (Allocate, and optionally
//! preferred allocation and PreStartContainer) and pushes device lists through
//! a [`Devices`] handle. When the kubelet restarts it deletes plugin sockets
//! and re-creates `kubelet.sock`; [`serve_device_plugin`] notices either at
//! once (inotify) and binds and registers again, where the kubelet's own
//! stub polls every 10 s.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, Inotify, WatchMask};
use nodeplugins_api::constants::device_plugin::{HEALTHY, UNHEALTHY, VERSION};
use nodeplugins_api::constants::layout::KUBELET_SOCKET;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::{BoundSocket, TransportError, dial, root_cause, serve};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::registrar::{PluginRegistration, Registrar, RegistrarError};

/// What a device plugin author implements.
#[async_trait::async_trait]
pub trait DevicePluginService: Send + Sync + 'static {
    /// Prepares `devices` for one container and says how to expose them.
    async fn allocate(&self, devices: Vec<String>)
    -> Result<dp::ContainerAllocateResponse, Status>;

    /// Picks `size` devices from `available`, including `must_include`; `None`
    /// (the default) means the plugin has no preference and does not offer it.
    async fn preferred_allocation(
        &self,
        _available: &[String],
        _must_include: &[String],
        _size: usize,
    ) -> Option<Vec<String>> {
        None
    }

    /// Whether [`preferred_allocation`](Self::preferred_allocation) is implemented.
    fn offers_preferred_allocation(&self) -> bool {
        false
    }

    /// Called before each container start when [`pre_start_required`](Self::pre_start_required).
    async fn pre_start_container(&self, _devices: Vec<String>) -> Result<(), Status> {
        Ok(())
    }

    /// Whether the kubelet must call PreStartContainer.
    fn pre_start_required(&self) -> bool {
        false
    }
}

/// The device list the plugin reports; every change goes out on ListAndWatch.
#[derive(Clone)]
pub struct Devices {
    tx: Arc<watch::Sender<Vec<dp::Device>>>,
}

impl Devices {
    /// A list starting with `devices`.
    pub fn new(devices: Vec<dp::Device>) -> Self {
        Self {
            tx: Arc::new(watch::channel(devices).0),
        }
    }

    /// Replaces the whole list.
    pub fn set(&self, devices: Vec<dp::Device>) {
        self.tx.send_replace(devices);
    }

    /// Marks device `id` healthy or not; returns whether it exists.
    pub fn set_health(&self, id: &str, healthy: bool) -> bool {
        let mut found = false;
        self.tx.send_if_modified(|list| {
            for device in list.iter_mut().filter(|d| d.id == id) {
                found = true;
                let health = if healthy { HEALTHY } else { UNHEALTHY };
                if device.health != health {
                    device.health = health.into();
                    return true;
                }
            }
            false
        });
        found
    }

    /// The current list.
    pub fn get(&self) -> Vec<dp::Device> {
        self.tx.borrow().clone()
    }

    fn subscribe(&self) -> watch::Receiver<Vec<dp::Device>> {
        self.tx.subscribe()
    }
}

/// How the plugin registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Through `<dir>/kubelet.sock`.
    KubeletSocket,
    /// Through a registration socket in this `plugins_registry` directory.
    Registry(PathBuf),
}

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct DevicePluginConfig {
    /// Extended resource name, such as `example.com/device`.
    pub resource: String,
    /// The device plugin directory (`<kubelet root>/device-plugins`).
    pub dir: PathBuf,
    /// The plugin's socket file name in `dir`.
    pub socket_name: String,
    /// How to register.
    pub registration: Registration,
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum DevicePluginError {
    /// The socket could not be served.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The registration socket could not be served.
    #[error(transparent)]
    Registrar(#[from] RegistrarError),
    /// The device plugin directory could not be watched.
    #[error("cannot watch {dir:?}: {source}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

type DeviceStream =
    Pin<Box<dyn futures::Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

struct Server<S> {
    service: Arc<S>,
    devices: Devices,
}

#[tonic::async_trait]
impl<S: DevicePluginService> dp::device_plugin_server::DevicePlugin for Server<S> {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(options(self.service.as_ref())))
    }

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let stream = tokio_stream::wrappers::WatchStream::new(self.devices.subscribe())
            .map(|devices| Ok(dp::ListAndWatchResponse { devices }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for r in request.into_inner().container_requests {
            let size = usize::try_from(r.allocation_size)
                .map_err(|_| Status::invalid_argument("negative allocation size"))?;
            let ids = self
                .service
                .preferred_allocation(&r.available_device_i_ds, &r.must_include_device_i_ds, size)
                .await
                .unwrap_or_default();
            container_responses.push(dp::ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let mut container_responses = Vec::new();
        for r in request.into_inner().container_requests {
            container_responses.push(self.service.allocate(r.devices_ids).await?);
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        request: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        self.service
            .pre_start_container(request.into_inner().devices_ids)
            .await?;
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

fn options(service: &impl DevicePluginService) -> dp::DevicePluginOptions {
    dp::DevicePluginOptions {
        pre_start_required: service.pre_start_required(),
        get_preferred_allocation_available: service.offers_preferred_allocation(),
    }
}

/// Why a serving round ended.
enum RoundEnd {
    Shutdown,
    KubeletRestarted,
}

/// Serves and registers the plugin until `shutdown`, binding and registering
/// again whenever the kubelet restarts.
pub async fn serve_device_plugin<S: DevicePluginService>(
    config: DevicePluginConfig,
    service: S,
    devices: Devices,
    shutdown: CancellationToken,
) -> Result<(), DevicePluginError> {
    let service = Arc::new(service);
    std::fs::create_dir_all(&config.dir).map_err(|source| DevicePluginError::Watch {
        dir: config.dir.clone(),
        source,
    })?;
    let watch_error = |source| DevicePluginError::Watch {
        dir: config.dir.clone(),
        source,
    };
    let inotify = Inotify::init().map_err(watch_error)?;
    inotify
        .watches()
        .add(
            &config.dir,
            WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE,
        )
        .map_err(watch_error)?;
    let mut events = inotify
        .into_event_stream([0u8; 4096])
        .map_err(watch_error)?;
    loop {
        let round = shutdown.child_token();
        let socket = config.dir.join(&config.socket_name);
        let bound = BoundSocket::bind(&socket, None).await?;
        let bound_identity = file_identity(&socket);
        let router = tonic::transport::Server::builder().add_service(
            dp::device_plugin_server::DevicePluginServer::new(Server {
                service: service.clone(),
                devices: devices.clone(),
            }),
        );
        let server = tokio::spawn(serve(bound, router, round.clone()));
        // Registration through kubelet.sock retries while events are
        // watched: the kubelet's start-up cleanup may delete the socket just
        // bound, and retrying against a deleted socket would never succeed.
        let kubelet_registration =
            register_with_kubelet(&config, options(service.as_ref()), &round);
        tokio::pin!(kubelet_registration);
        let mut registered = !matches!(config.registration, Registration::KubeletSocket);
        let registrar = match &config.registration {
            Registration::KubeletSocket => None,
            Registration::Registry(dir) => Some({
                std::fs::create_dir_all(dir).map_err(|source| DevicePluginError::Watch {
                    dir: dir.clone(),
                    source,
                })?;
                Registrar::builder(PluginRegistration {
                    plugin_type: nodeplugins_api::constants::plugin_type::DEVICE.into(),
                    name: config.resource.clone(),
                    endpoint: socket.display().to_string(),
                    versions: vec![VERSION.into()],
                })
                .registry_dir(dir)
                .start(round.clone())
                .await?
            }),
        };
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
            // Our own earlier rounds delete their sockets too: only a missing
            // or different file at our path means someone removed this one.
            let ours_gone = name == config.socket_name
                && event.mask.contains(EventMask::DELETE)
                && file_identity(&socket) != bound_identity;
            if kubelet_back || ours_gone {
                tracing::info!(resource = %config.resource, kubelet_back, ours_gone, "the kubelet restarted; registering again");
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

/// Registers through `kubelet.sock`, retrying until it succeeds or `stop` fires.
async fn register_with_kubelet(
    config: &DevicePluginConfig,
    options: dp::DevicePluginOptions,
    stop: &CancellationToken,
) {
    let kubelet = config.dir.join(KUBELET_SOCKET);
    let mut pause = Duration::from_millis(50);
    let mut last_error = String::new();
    loop {
        match register_once(&kubelet, config, options).await {
            Ok(()) => {
                tracing::info!(resource = %config.resource, "registered with the kubelet");
                return;
            }
            Err(error) => {
                if error != last_error {
                    tracing::warn!(resource = %config.resource, %error, "registration with the kubelet failed; retrying");
                    last_error = error;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

async fn register_once(
    kubelet: &Path,
    config: &DevicePluginConfig,
    options: dp::DevicePluginOptions,
) -> Result<(), String> {
    let channel = dial(kubelet, Duration::from_secs(10))
        .await
        .map_err(|e| root_cause(&e))?;
    let request = dp::RegisterRequest {
        version: VERSION.into(),
        endpoint: config.socket_name.clone(),
        resource_name: config.resource.clone(),
        options: Some(options),
    };
    let mut client = dp::registration_client::RegistrationClient::new(channel);
    let call = client.register(request);
    match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(status.message().to_string()),
        Err(_) => Err("no answer within 30s".into()),
    }
}

/// Device and inode of the file at `path`, if any.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

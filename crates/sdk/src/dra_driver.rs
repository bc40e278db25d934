//! Serving a DRA driver: `DRAPlugin` v1 and v1beta1 (and optionally device
//! health) on the service socket, registered through `plugins_registry`.
//!
//! The author implements [`DraDriver`] (prepare and unprepare) and, for
//! health, reports through a [`HealthReporter`]. [`DraDriverServer::start`]
//! serves the service socket first and only then the registration socket,
//! so the agent never sees a driver that cannot answer yet. On shutdown it
//! goes the other way: the registration socket goes first (the agent
//! deregisters this instance), then the service finishes the calls it is
//! running and removes its socket.
//!
//! For seamless upgrades give each instance an id (the pod UID): both
//! sockets get per-instance names, so the old and the new instance run side
//! by side and the agent calls the newest. Instances must keep no state
//! between calls, since a claim may be prepared by one and unprepared by
//! another; with `serialize` on (the default), calls are serialized across
//! instances by an exclusive lock on `<plugin dir>/serialize.lock`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::Stream;
use nodeplugins_api::constants::dra_service;
use nodeplugins_api::constants::layout::{DEFAULT_ROOT_DIR, PLUGINS_DIR, PLUGINS_REGISTRY_DIR};
use nodeplugins_api::constants::plugin_type;
use nodeplugins_api::dra::{v1, v1beta1};
use nodeplugins_api::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};
use nodeplugins_api::transport::{BoundSocket, TransportError, serve};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::registrar::{PluginRegistration, Registrar, RegistrarError, RegistrationState};

/// What a DRA driver author implements. Results are keyed by claim UID; a
/// claim without a result counts as failed for the agent.
#[async_trait::async_trait]
pub trait DraDriver: Send + Sync + 'static {
    /// Prepares `claims`: per claim, its devices or why it failed.
    async fn prepare(
        &self,
        claims: Vec<v1::Claim>,
    ) -> HashMap<String, Result<Vec<v1::Device>, String>>;

    /// Unprepares `claims`: per claim, success or why it failed. Must succeed
    /// for claims that were never prepared.
    async fn unprepare(&self, claims: Vec<v1::Claim>) -> HashMap<String, Result<(), String>>;
}

/// Which DRAPlugin versions to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersions {
    /// `v1.DRAPlugin`.
    pub v1: bool,
    /// `v1beta1.DRAPlugin`.
    pub v1beta1: bool,
}

impl Default for ApiVersions {
    fn default() -> Self {
        Self {
            v1: true,
            v1beta1: true,
        }
    }
}

/// The default interval at which device health is sent again unchanged, so
/// the agent's view never goes stale.
pub const HEALTH_RESEND_INTERVAL: Duration = Duration::from_secs(10);
/// The timeout sent with each device's health: three resend intervals.
pub const HEALTH_TIMEOUT_SECONDS: i64 = 30;

/// (pool, device) → (health, message).
type HealthTable = BTreeMap<(String, String), (health_v1::HealthStatus, String)>;

/// Device health the driver reports; every change goes out at once on the
/// `DRAResourceHealth` streams.
#[derive(Clone)]
pub struct HealthReporter {
    tx: Arc<watch::Sender<HealthTable>>,
}

impl Default for HealthReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl HealthReporter {
    /// A reporter with no devices.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(BTreeMap::new()).0),
        }
    }

    /// Sets the health of `device` in `pool`, with an explanation.
    pub fn set(
        &self,
        pool: &str,
        device: &str,
        health: health_v1::HealthStatus,
        message: impl Into<String>,
    ) {
        let message = message.into();
        let key = (pool.to_string(), device.to_string());
        self.tx.send_if_modified(|devices| {
            let value = (health, message);
            if devices.get(&key) == Some(&value) {
                return false;
            }
            devices.insert(key, value);
            true
        });
    }

    /// The current report, stamped now.
    pub fn snapshot(&self) -> health_v1::NodeWatchResourcesResponse {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        health_v1::NodeWatchResourcesResponse {
            devices: self
                .tx
                .borrow()
                .iter()
                .map(
                    |((pool, device), (health, message))| health_v1::DeviceHealth {
                        device: Some(health_v1::DeviceIdentifier {
                            pool_name: pool.clone(),
                            device_name: device.clone(),
                        }),
                        health: *health as i32,
                        last_updated_time: now,
                        health_check_timeout_seconds: HEALTH_TIMEOUT_SECONDS,
                        message: message.clone(),
                    },
                )
                .collect(),
        }
    }
}

/// Where and how to serve.
#[derive(Clone)]
pub struct DraDriverConfig {
    /// The driver name, such as `dra.example.com`.
    pub driver_name: String,
    /// The directory the agent watches (`<root>/plugins_registry`).
    pub registry_dir: PathBuf,
    /// The driver's own directory (`<root>/plugins/<driver>`): service socket and lock file.
    pub plugin_dir: PathBuf,
    /// A per-instance id (the pod UID) for rolling updates, if any.
    pub instance: Option<String>,
    /// Serialize prepare and unprepare calls (across instances with an id).
    pub serialize: bool,
    /// Which DRAPlugin versions to serve.
    pub api_versions: ApiVersions,
    /// Device health to serve, if the driver reports it.
    pub health: Option<HealthReporter>,
    /// See [`HEALTH_RESEND_INTERVAL`].
    pub health_resend: Duration,
    /// Serve the registration socket (default). Off for a driver whose
    /// registration is done elsewhere, such as by a separate registrar.
    pub register: bool,
}

impl DraDriverConfig {
    /// The defaults for `driver_name` under the kubelet root `root_dir`.
    pub fn new(driver_name: impl Into<String>, root_dir: impl AsRef<Path>) -> Self {
        let driver_name = driver_name.into();
        let root_dir = root_dir.as_ref();
        Self {
            registry_dir: root_dir.join(PLUGINS_REGISTRY_DIR),
            plugin_dir: root_dir.join(PLUGINS_DIR).join(&driver_name),
            driver_name,
            instance: None,
            serialize: true,
            api_versions: ApiVersions::default(),
            health: None,
            health_resend: HEALTH_RESEND_INTERVAL,
            register: true,
        }
    }

    /// The defaults under `/var/lib/kubelet`.
    pub fn with_default_root(driver_name: impl Into<String>) -> Self {
        Self::new(driver_name, DEFAULT_ROOT_DIR)
    }

    /// The service socket: `dra.sock`, or `dra-<instance>.sock`.
    pub fn service_socket(&self) -> PathBuf {
        match &self.instance {
            Some(id) => self.plugin_dir.join(format!("dra-{id}.sock")),
            None => self.plugin_dir.join("dra.sock"),
        }
    }

    /// The service names advertised as supported versions.
    pub fn services(&self) -> Vec<String> {
        let mut services = Vec::new();
        if self.api_versions.v1 {
            services.push(dra_service::V1.to_string());
        }
        if self.api_versions.v1beta1 {
            services.push(dra_service::V1BETA1.to_string());
        }
        if self.health.is_some() && !services.is_empty() {
            services.push(dra_service::HEALTH_V1.to_string());
            services.push(dra_service::HEALTH_V1ALPHA1.to_string());
        }
        services
    }
}

/// Why the driver could not be served.
#[derive(Debug, thiserror::Error)]
pub enum DraDriverError {
    /// Neither API version is enabled.
    #[error("no supported DRA gRPC API is implemented and enabled")]
    NoService,
    /// The plugin or registry directory could not be created.
    #[error("cannot create the directory {dir:?}: {source}")]
    PluginDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The service socket could not be served.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The registration socket could not be served.
    #[error(transparent)]
    Registrar(#[from] RegistrarError),
}

/// Serializes calls: not at all, within the process, or across processes.
enum Serializer {
    None,
    Process(tokio::sync::Mutex<()>),
    Flock(PathBuf),
}

/// Held while a serialized call runs.
enum SerialGuard<'a> {
    None,
    Process(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>),
    Flock(#[allow(dead_code)] std::fs::File),
}

impl Serializer {
    async fn acquire(&self) -> Result<SerialGuard<'_>, Status> {
        match self {
            Self::None => Ok(SerialGuard::None),
            Self::Process(mutex) => Ok(SerialGuard::Process(mutex.lock().await)),
            Self::Flock(path) => {
                let path = path.clone();
                // Dropping the file (also when this call is abandoned) unlocks it.
                let locked = tokio::task::spawn_blocking(move || {
                    let file = std::fs::OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(&path)?;
                    file.lock()?;
                    Ok::<_, std::io::Error>(file)
                })
                .await
                .map_err(|e| Status::internal(format!("serialize lock: {e}")))?
                .map_err(|e| Status::internal(format!("serialize lock: {e}")))?;
                Ok(SerialGuard::Flock(locked))
            }
        }
    }
}

struct Service {
    driver: Arc<dyn DraDriver>,
    serializer: Serializer,
}

impl Service {
    async fn prepare(
        &self,
        request: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let results = self.driver.prepare(request.claims).await;
        Ok(v1::NodePrepareResourcesResponse {
            claims: results
                .into_iter()
                .map(|(uid, result)| {
                    let response = match result {
                        Ok(devices) => v1::NodePrepareResourceResponse {
                            devices,
                            error: String::new(),
                        },
                        Err(error) => v1::NodePrepareResourceResponse {
                            devices: Vec::new(),
                            error,
                        },
                    };
                    (uid, response)
                })
                .collect(),
        })
    }

    async fn unprepare(
        &self,
        request: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let results = self.driver.unprepare(request.claims).await;
        Ok(v1::NodeUnprepareResourcesResponse {
            claims: results
                .into_iter()
                .map(|(uid, result)| {
                    let error = result.err().unwrap_or_default();
                    (uid, v1::NodeUnprepareResourceResponse { error })
                })
                .collect(),
        })
    }
}

struct V1(Arc<Service>);
struct V1beta1(Arc<Service>);

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for V1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        self.0
            .prepare(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        self.0
            .unprepare(request.into_inner())
            .await
            .map(Response::new)
    }
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for V1beta1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let response = self.0.prepare(request.into_inner().into()).await?;
        Ok(Response::new(response.into()))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let response = self.0.unprepare(request.into_inner().into()).await?;
        Ok(Response::new(response.into()))
    }
}

type HealthStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The health list now, then on every change and every `resend` interval.
fn health_stream(
    reporter: HealthReporter,
    resend: Duration,
) -> HealthStream<health_v1::NodeWatchResourcesResponse> {
    let changes = reporter.tx.subscribe();
    Box::pin(futures::stream::unfold(
        (reporter, changes, true),
        move |(reporter, mut changes, first)| async move {
            if !first {
                tokio::select! {
                    changed = changes.changed() => changed.ok()?,
                    () = tokio::time::sleep(resend) => {}
                }
            }
            changes.borrow_and_update();
            let snapshot = reporter.snapshot();
            Some((Ok(snapshot), (reporter, changes, false)))
        },
    ))
}

struct HealthV1 {
    reporter: HealthReporter,
    resend: Duration,
}

#[tonic::async_trait]
impl health_v1::dra_resource_health_server::DraResourceHealth for HealthV1 {
    type NodeWatchResourcesStream = HealthStream<health_v1::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _: Request<health_v1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(health_stream(
            self.reporter.clone(),
            self.resend,
        )))
    }
}

struct HealthV1alpha1 {
    reporter: HealthReporter,
    resend: Duration,
}

#[tonic::async_trait]
impl health_v1alpha1::dra_resource_health_server::DraResourceHealth for HealthV1alpha1 {
    type NodeWatchResourcesStream = HealthStream<health_v1alpha1::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _: Request<health_v1alpha1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        use futures::StreamExt;
        let stream = health_stream(self.reporter.clone(), self.resend)
            .map(|message| message.map(Into::into));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A serving DRA driver: its service socket and its registration socket.
pub struct DraDriverServer {
    service_socket: PathBuf,
    registration_socket: Option<PathBuf>,
    registration: Option<watch::Receiver<RegistrationState>>,
    task: JoinHandle<Result<(), TransportError>>,
}

impl DraDriverServer {
    /// Serves the service socket, then registers. Stops (registration first)
    /// when `shutdown` fires.
    pub async fn start(
        config: DraDriverConfig,
        driver: Arc<dyn DraDriver>,
        shutdown: CancellationToken,
    ) -> Result<Self, DraDriverError> {
        let services = config.services();
        if !config.api_versions.v1 && !config.api_versions.v1beta1 {
            return Err(DraDriverError::NoService);
        }
        // Both directories, so a driver may start before the agent.
        let mut dirs = vec![&config.plugin_dir];
        if config.register {
            dirs.push(&config.registry_dir);
        }
        for dir in dirs {
            std::fs::create_dir_all(dir).map_err(|source| DraDriverError::PluginDir {
                dir: dir.clone(),
                source,
            })?;
        }
        let serializer = match (config.serialize, &config.instance) {
            (false, _) => Serializer::None,
            (true, None) => Serializer::Process(tokio::sync::Mutex::new(())),
            (true, Some(_)) => Serializer::Flock(config.plugin_dir.join("serialize.lock")),
        };
        let service = Arc::new(Service { driver, serializer });
        let service_socket = config.service_socket();
        let socket = BoundSocket::bind(&service_socket, None).await?;
        let mut router = tonic::transport::Server::builder().add_optional_service(
            config
                .api_versions
                .v1
                .then(|| v1::dra_plugin_server::DraPluginServer::new(V1(service.clone()))),
        );
        router =
            router.add_optional_service(config.api_versions.v1beta1.then(|| {
                v1beta1::dra_plugin_server::DraPluginServer::new(V1beta1(service.clone()))
            }));
        if let Some(reporter) = &config.health {
            router = router
                .add_service(
                    health_v1::dra_resource_health_server::DraResourceHealthServer::new(HealthV1 {
                        reporter: reporter.clone(),
                        resend: config.health_resend,
                    }),
                )
                .add_service(
                    health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
                        HealthV1alpha1 {
                            reporter: reporter.clone(),
                            resend: config.health_resend,
                        },
                    ),
                );
        }
        let service_shutdown = CancellationToken::new();
        let serving = tokio::spawn(serve(socket, router, service_shutdown.clone()));
        tracing::info!(driver = %config.driver_name, socket = %service_socket.display(), ?services,
            "DRA service listening");

        let registrar = if config.register {
            let info = PluginRegistration {
                plugin_type: plugin_type::DRA.into(),
                name: config.driver_name.clone(),
                endpoint: service_socket.display().to_string(),
                versions: services,
            };
            let mut builder = Registrar::builder(info).registry_dir(&config.registry_dir);
            if let Some(id) = &config.instance {
                builder = builder.rolling_update(id.clone());
            }
            match builder.start(CancellationToken::new()).await {
                Ok(registrar) => Some(registrar),
                Err(e) => {
                    service_shutdown.cancel();
                    let _ = serving.await;
                    return Err(e.into());
                }
            }
        } else {
            None
        };
        let registration_socket = registrar.as_ref().map(|r| r.socket().to_owned());
        let registration = registrar.as_ref().map(Registrar::state);
        let task = tokio::spawn(async move {
            shutdown.cancelled().await;
            // Deregister first, so the agent stops choosing this instance,
            // then let the service finish what it is running.
            let registered = match registrar {
                Some(registrar) => registrar.stop().await,
                None => Ok(()),
            };
            service_shutdown.cancel();
            let served = match serving.await {
                Ok(result) => result,
                Err(e) => Err(TransportError::Bind {
                    path: PathBuf::new(),
                    source: std::io::Error::other(e),
                }),
            };
            registered.and(served)
        });
        Ok(Self {
            service_socket,
            registration_socket,
            registration,
            task,
        })
    }

    /// The service socket (the registered endpoint).
    pub fn service_socket(&self) -> &Path {
        &self.service_socket
    }

    /// The registration socket, unless registration is off.
    pub fn registration_socket(&self) -> Option<&Path> {
        self.registration_socket.as_deref()
    }

    /// The agent's verdict on the registration, unless registration is off.
    pub fn registration(&self) -> Option<watch::Receiver<RegistrationState>> {
        self.registration.clone()
    }

    /// Waits until both sockets are closed and removed (after shutdown).
    pub async fn wait(self) -> Result<(), TransportError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(TransportError::Bind {
                path: self.service_socket,
                source: std::io::Error::other(e),
            }),
        }
    }
}

//! A serving DRA driver: the service socket first, then the registration
//! socket, then publishing. On shutdown the registration socket goes first
//! (the agent stops choosing this instance), then publishing stops at once
//! (a request in flight is dropped: a black-holed API server holds up
//! nothing), then the service finishes the calls it is running and removes
//! its socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodeplugins_api::constants::plugin_type;
use nodeplugins_api::dra::{v1, v1beta1};
use nodeplugins_api::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};
use nodeplugins_api::transport::{BoundSocket, TransportError, serve};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::builder::DraDriverBuilder;
use super::cdi::CdiSpecs;
#[cfg(feature = "kube")]
use super::claims_api::ClaimsApi;
use super::device_metadata::MetadataFiles;
use super::driver::DraDriver;
use super::error::DraDriverError;
use super::grpc::{V1, V1beta1};
use super::health::{HealthV1, HealthV1alpha1};
use super::serializer::Serializer;
use super::service::Service;
use super::store::ClaimStore;

use crate::registrar::{PluginRegistration, Registrar, RegistrationState};

/// How long one request to the API server (reading a claim, writing a
/// slice) may take.
#[cfg(feature = "kube")]
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl DraDriverBuilder {
    /// Serves the service socket, then registers. Stops (registration
    /// first) when `shutdown` fires.
    pub async fn start(
        self,
        shutdown: CancellationToken,
    ) -> Result<DraDriverServer, DraDriverError> {
        DraDriverServer::start(self, shutdown).await
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
    /// A server for `driver` named `driver_name`, with the defaults; set
    /// what differs, then [`start`](DraDriverBuilder::start) it.
    pub fn builder(driver_name: impl Into<String>, driver: Arc<dyn DraDriver>) -> DraDriverBuilder {
        DraDriverBuilder::new(driver_name.into(), driver)
    }

    async fn start(
        config: DraDriverBuilder,
        shutdown: CancellationToken,
    ) -> Result<Self, DraDriverError> {
        let services = config.services();
        if !config.api_versions.v1 && !config.api_versions.v1beta1 {
            return Err(DraDriverError::NoService);
        }
        #[cfg(feature = "kube")]
        if config.resources.is_some() && config.kube.is_none() {
            return Err(DraDriverError::ResourcesWithoutKube);
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
            (true, Some(_)) => Serializer::file(config.lock_path()),
        };
        let state = config.state_path();
        if let Some(dir) = &state {
            std::fs::create_dir_all(dir).map_err(|source| DraDriverError::PluginDir {
                dir: dir.clone(),
                source,
            })?;
        }
        #[cfg(feature = "kube")]
        let versions = config
            .kube
            .as_ref()
            .map(|k| super::resource_api::ResourceVersions::new(k.client.clone()));
        let service = Arc::new(Service {
            driver: config.driver.clone(),
            serializer,
            prepares: Default::default(),
            unprepares: Default::default(),
            store: ClaimStore::new(state.as_deref()),
            boot_id: config.boot_id.clone().or_else(super::boot::boot_id),
            metadata: config.device_metadata.then(|| {
                MetadataFiles::new(&config.driver_name, &config.plugin_dir, &config.cdi_dir)
            }),
            cdi: config
                .cdi_kind
                .as_ref()
                .map(|kind| CdiSpecs::new(&config.cdi_dir, kind)),
            #[cfg(feature = "kube")]
            claims_api: versions.clone().map(|versions| ClaimsApi {
                versions,
                driver: config.driver_name.clone(),
                timeout: REQUEST_TIMEOUT,
            }),
        });
        service.restore_cdi_specs().await;
        let service_socket = config.service_socket();
        let socket = BoundSocket::bind(&service_socket, None).await?;
        let mut router = crate::call_span::server(service_socket.display()).add_optional_service(
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
        let publish_stop = CancellationToken::new();
        #[cfg(feature = "kube")]
        let publishing = match (&config.kube, &config.resources, versions) {
            (Some(kube), Some(resources), Some(versions)) => {
                Some(tokio::spawn(super::slices::publish(
                    super::slices::PublishSettings {
                        versions,
                        node: kube.node_name.clone(),
                        driver: config.driver_name.clone(),
                        resources: resources.clone(),
                        on_error: config.on_publish_error.clone(),
                        on_driver_error: config.on_error.clone(),
                        timeout: REQUEST_TIMEOUT,
                    },
                    publish_stop.clone(),
                )))
            }
            _ => None,
        };
        let on_error = config.on_error.clone();
        let served_socket = service_socket.clone();
        let task = tokio::spawn(async move {
            let mut serving = serving;
            // A service that stops before shutdown is fatal: the driver
            // hears of it, and shuts down.
            let stopped = tokio::select! {
                () = shutdown.cancelled() => None,
                ended = &mut serving => Some(stopped_early(ended, &served_socket, on_error.as_deref())),
            };
            if stopped.is_some() {
                shutdown.cancelled().await;
            }
            // Deregister first, so the agent stops choosing this instance.
            let registered = match registrar {
                Some(registrar) => registrar.stop().await,
                None => Ok(()),
            };
            // Publishing stops at once, whatever it is waiting for.
            publish_stop.cancel();
            #[cfg(feature = "kube")]
            if let Some(publishing) = publishing {
                let _ = publishing.await;
            }
            // The service finishes what it is running.
            service_shutdown.cancel();
            let served = match stopped {
                Some(result) => result,
                None => joined(serving.await, &served_socket),
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
            Err(source) => Err(TransportError::Task {
                path: self.service_socket,
                source,
            }),
        }
    }
}

/// What the task serving `socket` ended with.
fn joined(
    ended: Result<Result<(), TransportError>, tokio::task::JoinError>,
    socket: &Path,
) -> Result<(), TransportError> {
    ended.unwrap_or_else(|source| {
        Err(TransportError::Task {
            path: socket.to_owned(),
            source,
        })
    })
}

/// The service stopped before shutdown: tells `on_error` (fatal), and
/// gives what it ended with.
fn stopped_early(
    ended: Result<Result<(), TransportError>, tokio::task::JoinError>,
    socket: &Path,
    on_error: Option<&(dyn Fn(&DraDriverError) + Send + Sync)>,
) -> Result<(), TransportError> {
    let error = match joined(ended, socket) {
        Ok(()) => DraDriverError::ServiceStopped,
        Err(e) => DraDriverError::Transport(e),
    };
    tracing::error!(error = %error, "the DRA service stopped serving");
    if let Some(handler) = on_error {
        handler(&error);
    }
    match error {
        DraDriverError::Transport(e) => Err(e),
        _ => Ok(()),
    }
}

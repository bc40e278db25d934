//! One benchmark plugin: a registration socket that also serves its type's
//! own service on the same socket (the endpoint it reports is empty, so the
//! handler dials the registration socket), and records when it is told it is
//! registered.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use nodeplugins_api::constants::{
    CSI_REGISTRATION_VERSION, device_plugin, dra_service, plugin_type,
};
use nodeplugins_api::csi::v1 as csi;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::dra::v1 as dra;
use nodeplugins_api::pluginregistration::v1 as reg;
use nodeplugins_api::transport::{BoundSocket, serve};
use nodeplugins_sdk::csi_driver::CsiNodeDriver;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

#[derive(Clone)]
struct Registration {
    info: reg::PluginInfo,
    registered: Arc<Mutex<Option<oneshot::Sender<Instant>>>>,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let now = Instant::now();
        if request.into_inner().plugin_registered {
            let sender = self.registered.lock().map(|mut s| s.take()).unwrap_or(None);
            if let Some(sender) = sender {
                let _ = sender.send(now);
            }
        }
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

type DeviceStream =
    Pin<Box<dyn futures::Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[derive(Clone)]
struct Devices;

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Devices {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(dp::DevicePluginOptions::default()))
    }

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let device = dp::Device {
            id: "dev-0".into(),
            health: device_plugin::HEALTHY.into(),
            topology: None,
        };
        let first = futures::stream::once(async move {
            Ok(dp::ListAndWatchResponse {
                devices: vec![device],
            })
        });
        Ok(Response::new(Box::pin(futures::StreamExt::chain(
            first,
            futures::stream::pending(),
        ))))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        Ok(Response::new(dp::PreferredAllocationResponse::default()))
    }

    async fn allocate(
        &self,
        r: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let container_responses = r
            .into_inner()
            .container_requests
            .iter()
            .map(|_| Default::default())
            .collect();
        Ok(Response::new(dp::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

#[derive(Clone)]
struct Dra;

#[tonic::async_trait]
impl dra::dra_plugin_server::DraPlugin for Dra {
    async fn node_prepare_resources(
        &self,
        r: Request<dra::NodePrepareResourcesRequest>,
    ) -> Result<Response<dra::NodePrepareResourcesResponse>, Status> {
        let claims = r
            .into_inner()
            .claims
            .into_iter()
            .map(|c| (c.uid, Default::default()))
            .collect();
        Ok(Response::new(dra::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        r: Request<dra::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<dra::NodeUnprepareResourcesResponse>, Status> {
        let claims = r
            .into_inner()
            .claims
            .into_iter()
            .map(|c| (c.uid, Default::default()))
            .collect();
        Ok(Response::new(dra::NodeUnprepareResourcesResponse {
            claims,
        }))
    }
}

/// A running benchmark plugin.
pub(crate) struct FleetPlugin {
    pub(crate) socket: PathBuf,
    /// When the socket started listening.
    pub(crate) listening_at: Instant,
    /// Resolves when NotifyRegistrationStatus(true) arrives.
    pub(crate) registered: oneshot::Receiver<Instant>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// The names and versions a plugin of `kind` reports.
fn identity(kind: &str, index: usize) -> (String, Vec<String>) {
    match kind {
        plugin_type::DEVICE => (
            format!("bench.example.com/dev{index}"),
            vec![device_plugin::VERSION.into()],
        ),
        plugin_type::DRA => (
            format!("dra{index}.bench.example.com"),
            vec![dra_service::V1.into()],
        ),
        _ => (
            format!("csi{index}.bench.example.com"),
            vec![CSI_REGISTRATION_VERSION.into()],
        ),
    }
}

impl FleetPlugin {
    /// Binds `socket` and serves a plugin of type `kind`.
    pub(crate) async fn start(socket: PathBuf, kind: &str, index: usize) -> anyhow::Result<Self> {
        let (name, versions) = identity(kind, index);
        let (tx, rx) = oneshot::channel();
        let registration = Registration {
            info: reg::PluginInfo {
                r#type: kind.into(),
                name: name.clone(),
                endpoint: String::new(),
                supported_versions: versions,
            },
            registered: Arc::new(Mutex::new(Some(tx))),
        };
        let bound = BoundSocket::bind(&socket, None).await?;
        let listening_at = Instant::now();
        let server = tonic::transport::Server::builder().add_service(
            reg::registration_server::RegistrationServer::new(registration),
        );
        let router = match kind {
            plugin_type::DEVICE => {
                server.add_service(dp::device_plugin_server::DevicePluginServer::new(Devices))
            }
            plugin_type::DRA => {
                server.add_service(dra::dra_plugin_server::DraPluginServer::new(Dra))
            }
            _ => {
                let driver = CsiNodeDriver::new(name, "bench-node");
                server
                    .add_service(csi::identity_server::IdentityServer::new(driver.clone()))
                    .add_service(csi::node_server::NodeServer::new(driver))
            }
        };
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = serve(bound, router, stop).await {
                tracing::warn!(error = %e, "benchmark plugin failed");
            }
        });
        Ok(Self {
            socket,
            listening_at,
            registered: rx,
            shutdown,
            task,
        })
    }

    /// Stops serving and removes the socket.
    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

//! The kubelet's side of the registration protocols, for testing plugins:
//! a client for plugin registration sockets and a `kubelet.sock` server that
//! records device plugin registrations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::pluginregistration::v1::registration_client::RegistrationClient;
use nodeplugins_api::pluginregistration::v1::{InfoRequest, PluginInfo, RegistrationStatus};
use nodeplugins_api::transport::{BoundSocket, dial, serve};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// The kubelet's dial timeout for registration sockets.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Calls GetInfo on a registration socket.
pub async fn get_info(socket: &Path) -> anyhow::Result<PluginInfo> {
    let channel = dial(socket, DIAL_TIMEOUT).await?;
    Ok(RegistrationClient::new(channel)
        .get_info(InfoRequest {})
        .await?
        .into_inner())
}

/// Calls NotifyRegistrationStatus on a registration socket.
pub async fn notify(socket: &Path, registered: bool, error: &str) -> anyhow::Result<()> {
    let channel = dial(socket, DIAL_TIMEOUT).await?;
    RegistrationClient::new(channel)
        .notify_registration_status(RegistrationStatus {
            plugin_registered: registered,
            error: error.to_string(),
        })
        .await?;
    Ok(())
}

#[derive(Clone)]
struct KubeletRegistration {
    requests: watch::Sender<Vec<dp::RegisterRequest>>,
}

#[tonic::async_trait]
impl dp::registration_server::Registration for KubeletRegistration {
    async fn register(
        &self,
        request: Request<dp::RegisterRequest>,
    ) -> Result<Response<dp::Empty>, Status> {
        let request = request.into_inner();
        if request.version != "v1beta1" {
            return Err(Status::invalid_argument(format!(
                "requested API version {:?} is not supported by kubelet. Supported version is \"v1beta1\"",
                request.version
            )));
        }
        self.requests.send_modify(|all| all.push(request));
        Ok(Response::new(dp::Empty {}))
    }
}

/// A `kubelet.sock` that accepts every v1beta1 registration and records it.
pub struct FakeKubeletSocket {
    socket: PathBuf,
    requests: watch::Sender<Vec<dp::RegisterRequest>>,
    shutdown: CancellationToken,
}

impl FakeKubeletSocket {
    /// Serves on `socket`.
    pub async fn serve(socket: impl Into<PathBuf>) -> Self {
        let socket = socket.into();
        let bound = BoundSocket::bind(&socket, None)
            .await
            .expect("bind kubelet.sock");
        let (requests, _) = watch::channel(Vec::new());
        let service = KubeletRegistration {
            requests: requests.clone(),
        };
        let shutdown = CancellationToken::new();
        let router = tonic::transport::Server::builder()
            .add_service(dp::registration_server::RegistrationServer::new(service));
        tokio::spawn(serve(bound, router, shutdown.clone()));
        Self {
            socket,
            requests,
            shutdown,
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Registrations received so far.
    pub fn requests(&self) -> watch::Receiver<Vec<dp::RegisterRequest>> {
        self.requests.subscribe()
    }
}

impl Drop for FakeKubeletSocket {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

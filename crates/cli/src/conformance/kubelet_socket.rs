//! The tool's `kubelet.sock`: the device plugin Registration service a
//! kubelet serves, recording every Register request, and made again to
//! stand for a kubelet restart.

use std::path::{Path, PathBuf};

use nodeplugins_api::deviceplugin::v1beta1::registration_server::{
    Registration, RegistrationServer,
};
use nodeplugins_api::deviceplugin::v1beta1::{Empty, RegisterRequest};
use nodeplugins_api::transport::{BoundSocket, serve};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The socket's file name, as the kubelet names it.
pub(crate) const KUBELET_SOCKET: &str = "kubelet.sock";

struct Recorder {
    requests: mpsc::UnboundedSender<RegisterRequest>,
}

#[tonic::async_trait]
impl Registration for Recorder {
    async fn register(
        &self,
        request: tonic::Request<RegisterRequest>,
    ) -> Result<tonic::Response<Empty>, tonic::Status> {
        let _ = self.requests.send(request.into_inner());
        Ok(tonic::Response::new(Empty {}))
    }
}

/// `kubelet.sock` served in a directory.
pub(crate) struct KubeletSocket {
    dir: PathBuf,
    requests: mpsc::UnboundedSender<RegisterRequest>,
    shutdown: CancellationToken,
    server: Option<JoinHandle<()>>,
}

impl KubeletSocket {
    /// Serves `dir/kubelet.sock`; Register requests arrive on the receiver.
    pub(crate) async fn start(
        dir: &Path,
    ) -> Result<(Self, mpsc::UnboundedReceiver<RegisterRequest>), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let (requests, received) = mpsc::unbounded_channel();
        let mut socket = Self {
            dir: dir.to_owned(),
            requests,
            shutdown: CancellationToken::new(),
            server: None,
        };
        socket.bind().await?;
        Ok((socket, received))
    }

    /// The socket's path.
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(KUBELET_SOCKET)
    }

    async fn bind(&mut self) -> Result<(), String> {
        let path = self.path();
        let bound = BoundSocket::bind(&path, Some(0o600))
            .await
            .map_err(|e| format!("serve {}: {e}", path.display()))?;
        let router =
            tonic::transport::Server::builder().add_service(RegistrationServer::new(Recorder {
                requests: self.requests.clone(),
            }));
        self.shutdown = CancellationToken::new();
        let shutdown = self.shutdown.clone();
        self.server = Some(tokio::spawn(async move {
            if let Err(e) = serve(bound, router, shutdown).await {
                tracing::warn!(error = %e, "the conformance kubelet.sock stopped");
            }
        }));
        Ok(())
    }

    /// Stops serving and removes the socket, then serves a new one: what a
    /// plugin sees of a kubelet restart.
    pub(crate) async fn restart(&mut self) -> Result<(), String> {
        self.stop().await;
        self.bind().await
    }

    /// Stops serving and removes the socket.
    pub(crate) async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

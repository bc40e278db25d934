//! The tool's `kubelet.sock`: the device plugin Registration service a
//! kubelet serves, recording every Register request, and made again to
//! stand for a kubelet restart.
//!
//! Register does what the kubelet's does before it answers (device manager
//! `server.Register`, `connectClient`): it refuses a wrong version or
//! resource name, dials the plugin's endpoint (10 s) and calls
//! GetDevicePluginOptions. A plugin that serves only once Register has
//! returned is refused, as by the kubelet.

use std::path::{Path, PathBuf};

use nodeplugins_api::call;
use nodeplugins_api::constants::device_plugin;
use nodeplugins_api::deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use nodeplugins_api::deviceplugin::v1beta1::registration_server::{
    Registration, RegistrationServer,
};
use nodeplugins_api::deviceplugin::v1beta1::{DevicePluginOptions, Empty, RegisterRequest};
use nodeplugins_api::names::is_extended_resource_name;
use nodeplugins_api::transport::{BoundSocket, dial, root_cause, serve};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::deadlines::Deadlines;

/// The socket's file name, as the kubelet names it.
pub(crate) const KUBELET_SOCKET: &str = "kubelet.sock";

/// How long Register waits between dials of a plugin not yet serving.
const REDIAL: std::time::Duration = std::time::Duration::from_millis(100);

/// A Register request and what came of it.
#[derive(Debug)]
pub(crate) struct Registered {
    pub(crate) request: RegisterRequest,
    /// The plugin's options, or why Register was refused.
    pub(crate) connected: Result<DevicePluginOptions, String>,
}

struct Recorder {
    dir: PathBuf,
    deadlines: Deadlines,
    requests: mpsc::UnboundedSender<Registered>,
}

impl Recorder {
    /// What the kubelet checks and does before it answers Register.
    async fn connect(&self, request: &RegisterRequest) -> Result<DevicePluginOptions, String> {
        if request.version != device_plugin::VERSION {
            return Err(format!(
                "version {:?} is not {}",
                request.version,
                device_plugin::VERSION
            ));
        }
        if !is_extended_resource_name(&request.resource_name) {
            return Err(format!(
                "{:?} is not an extended resource name",
                request.resource_name
            ));
        }
        let endpoint = &request.endpoint;
        if endpoint.is_empty() || endpoint.contains('/') {
            return Err(format!(
                "endpoint {endpoint:?} is not a file name in {}",
                self.dir.display()
            ));
        }
        let path = self.dir.join(endpoint);
        // The kubelet's dial blocks, retrying, until its deadline.
        let deadline = tokio::time::Instant::now() + self.deadlines.dial();
        let channel = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match dial(&path, left).await {
                Ok(channel) => break channel,
                Err(_) if left > REDIAL => tokio::time::sleep(REDIAL).await,
                Err(e) => {
                    return Err(format!(
                        "{} did not accept a connection during Register, within {:?}: {}",
                        path.display(),
                        self.deadlines.dial(),
                        root_cause(&e)
                    ));
                }
            }
        };
        let mut client = DevicePluginClient::new(channel);
        let options = client.get_device_plugin_options(Empty {});
        call::unary(self.deadlines.device_call(), options)
            .await
            .map_err(|e| format!("GetDevicePluginOptions during Register: {e}"))
    }
}

#[tonic::async_trait]
impl Registration for Recorder {
    async fn register(
        &self,
        request: tonic::Request<RegisterRequest>,
    ) -> Result<tonic::Response<Empty>, tonic::Status> {
        let request = request.into_inner();
        let connected = self.connect(&request).await;
        let answer = match &connected {
            Ok(_) => Ok(tonic::Response::new(Empty {})),
            Err(why) => Err(tonic::Status::unknown(why.clone())),
        };
        let _ = self.requests.send(Registered { request, connected });
        answer
    }
}

/// `kubelet.sock` served in a directory.
pub(crate) struct KubeletSocket {
    dir: PathBuf,
    deadlines: Deadlines,
    requests: mpsc::UnboundedSender<Registered>,
    shutdown: CancellationToken,
    server: Option<JoinHandle<()>>,
}

impl KubeletSocket {
    /// Serves `dir/kubelet.sock`; Register requests arrive on the receiver.
    pub(crate) async fn start(
        dir: &Path,
        deadlines: Deadlines,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Registered>), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let (requests, received) = mpsc::unbounded_channel();
        let mut socket = Self {
            dir: dir.to_owned(),
            deadlines,
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
                dir: self.dir.clone(),
                deadlines: self.deadlines,
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

    /// What a plugin sees of a kubelet restart: the socket stops, every
    /// socket in the directory is removed (the device manager's
    /// `CleanupPluginDirectory`, the plugins' own included), and a new
    /// `kubelet.sock` is served. Returns the sockets removed.
    pub(crate) async fn restart(&mut self) -> Result<Vec<PathBuf>, String> {
        use std::os::unix::fs::FileTypeExt;
        self.stop().await;
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| format!("read {}: {e}", self.dir.display()))?;
        let mut removed = Vec::new();
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_socket())
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed.push(entry.path());
            }
        }
        self.bind().await?;
        Ok(removed)
    }

    /// Stops serving and removes the socket.
    pub(crate) async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

//! `<root>/device-plugins/kubelet.sock`: the `v1beta1.Registration` service
//! device plugins call, served through our transport (most Go device plugins
//! dial it with a path-valued `:authority`).

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use nodeplugins_api::constants::device_plugin::{SUPPORTED_VERSIONS, VERSION};
use nodeplugins_api::constants::layout::{DEVICE_CHECKPOINT, KUBELET_SOCKET};
use nodeplugins_api::deviceplugin::v1beta1::registration_server::{
    Registration, RegistrationServer,
};
use nodeplugins_api::deviceplugin::v1beta1::{Empty, RegisterRequest};
use nodeplugins_api::transport::{BoundSocket, TransportError};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::common::served_socket;
use crate::device::handle::DeviceHandle;
use crate::device::registration::plugin_client::DeviceError;
use nodeplugins_api::names::{is_extended_resource_name, is_plain_socket_name};

#[derive(Clone)]
struct KubeletRegistration {
    devices: DeviceHandle,
}

#[tonic::async_trait]
impl Registration for KubeletRegistration {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let request = request.into_inner();
        let resource = request.resource_name.as_str();
        if !SUPPORTED_VERSIONS.contains(&request.version.as_str()) {
            return Err(Status::invalid_argument(format!(
                "requested API version {:?} is not supported by kubelet. Supported version is {VERSION:?}",
                request.version
            )));
        }
        if !is_extended_resource_name(resource) {
            return Err(Status::invalid_argument(format!(
                "the ResourceName {resource:?} is invalid"
            )));
        }
        let dir = &self.devices.config().dir;
        if !is_plain_socket_name(&request.endpoint) {
            return Err(Status::invalid_argument(format!(
                "invalid endpoint {:?}: must be the name of a socket file in {}",
                request.endpoint,
                dir.display()
            )));
        }
        let socket = dir.join(&request.endpoint);
        tracing::info!(%resource, socket = %socket.display(), "device plugin registering through kubelet.sock");
        match self.devices.connect(resource, &socket).await {
            Ok(()) => Ok(Response::new(Empty {})),
            Err(e @ DeviceError::AlreadyConnected { .. }) => {
                Err(Status::already_exists(e.to_string()))
            }
            Err(e) => {
                tracing::warn!(%resource, socket = %socket.display(), error = %e, "device plugin registration failed");
                Err(Status::failed_precondition(e.to_string()))
            }
        }
    }
}

/// Removes every socket in the device plugin directory except `kubelet.sock`
/// and the kubelet's checkpoint, as the kubelet does on start: plugins notice
/// and register again. Other files and directories are kept.
pub(crate) fn clean_plugin_directory(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        if name == KUBELET_SOCKET || name == DEVICE_CHECKPOINT {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_socket()) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    tracing::info!(socket = %entry.path().display(), "removed device plugin socket left from before")
                }
                Err(e) => {
                    tracing::warn!(socket = %entry.path().display(), error = %e, "cannot remove old device plugin socket")
                }
            }
        }
    }
    Ok(())
}

/// Binds `<dir>/kubelet.sock`, creating the directory if needed.
pub(crate) async fn bind(dir: &Path) -> Result<BoundSocket, TransportError> {
    std::fs::create_dir_all(dir).map_err(|source| TransportError::Bind {
        path: dir.to_owned(),
        source,
    })?;
    BoundSocket::bind(dir.join(KUBELET_SOCKET), None).await
}

/// Serves registration on `socket` until `shutdown`, and serves it again
/// whenever the file is removed: without `kubelet.sock` no device plugin
/// could register.
pub(crate) async fn serve(
    socket: BoundSocket,
    devices: DeviceHandle,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let dir = devices.config().dir.clone();
    let router = || {
        tonic::transport::Server::builder().add_service(RegistrationServer::new(
            KubeletRegistration {
                devices: devices.clone(),
            },
        ))
    };
    served_socket::serve_grpc(
        &devices.config().fs_watcher,
        socket,
        || bind(&dir),
        router,
        "device plugin registration (kubelet.sock)",
        || devices.metrics().kubelet_socket_recreated(),
        shutdown,
    )
    .await
}

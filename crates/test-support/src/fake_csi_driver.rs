//! A CSI driver: Identity and Node (registration subset) on a socket.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nodeplugins_api::csi::v1 as csi;
use nodeplugins_api::transport::{BoundSocket, serve};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

#[derive(Clone)]
struct Driver {
    name: String,
    node_id: String,
    max_volumes: i64,
    topology: HashMap<String, String>,
    fail_node_get_info: bool,
}

#[tonic::async_trait]
impl csi::identity_server::Identity for Driver {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: "0.0.1".into(),
            manifest: HashMap::new(),
        }))
    }
    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::GetPluginCapabilitiesResponse::default()))
    }
    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for Driver {
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::NodeGetCapabilitiesResponse::default()))
    }
    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        if self.fail_node_get_info {
            return Err(Status::unavailable("node agent not ready"));
        }
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: self.max_volumes,
            accessible_topology: Some(csi::Topology {
                segments: self.topology.clone(),
            }),
        }))
    }
}

/// A running CSI driver.
pub struct FakeCsiDriver {
    socket: PathBuf,
    shutdown: CancellationToken,
}

impl FakeCsiDriver {
    /// Serves driver `name` reporting `node_id`, 16 volumes and zone `z1`;
    /// with `fail_node_get_info`, NodeGetInfo answers UNAVAILABLE.
    pub async fn serve(
        socket: impl Into<PathBuf>,
        name: &str,
        node_id: &str,
        fail_node_get_info: bool,
    ) -> Self {
        let socket = socket.into();
        let driver = Driver {
            name: name.into(),
            node_id: node_id.into(),
            max_volumes: 16,
            topology: [("topology.example.com/zone".to_string(), "z1".to_string())].into(),
            fail_node_get_info,
        };
        let bound = BoundSocket::bind(&socket, None)
            .await
            .expect("bind fake CSI driver");
        let shutdown = CancellationToken::new();
        let router = tonic::transport::Server::builder()
            .add_service(csi::identity_server::IdentityServer::new(driver.clone()))
            .add_service(csi::node_server::NodeServer::new(driver));
        tokio::spawn(serve(bound, router, shutdown.clone()));
        Self { socket, shutdown }
    }

    /// The driver's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for FakeCsiDriver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

//! A minimal CSI node driver server: Identity (GetPluginInfo,
//! GetPluginCapabilities, Probe) and the node-registration part of Node
//! (NodeGetCapabilities, NodeGetInfo), from a plain description. Used by
//! `example-csi-driver`, the fleet benchmark and tests.

use std::collections::HashMap;

use nodeplugins_api::csi::v1 as csi;
use tonic::transport::server::Router;
use tonic::{Request, Response, Status};

/// What the driver reports.
#[derive(Debug, Clone, Default)]
pub struct CsiNodeDriver {
    /// Driver name (GetPluginInfo).
    pub name: String,
    /// Vendor version (GetPluginInfo).
    pub vendor_version: String,
    /// This node's id in the driver (NodeGetInfo).
    pub node_id: String,
    /// Volumes attachable to the node; 0 means no limit (NodeGetInfo).
    pub max_volumes_per_node: i64,
    /// Accessible topology (NodeGetInfo); non-empty also advertises the
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS capability.
    pub topology: HashMap<String, String>,
    /// Answer NodeGetInfo with UNAVAILABLE, to exercise failure handling.
    pub fail_node_get_info: bool,
}

impl CsiNodeDriver {
    /// A tonic router serving Identity and Node.
    pub fn router(self) -> Router {
        tonic::transport::Server::builder()
            .add_service(csi::identity_server::IdentityServer::new(self.clone()))
            .add_service(csi::node_server::NodeServer::new(self))
    }
}

#[tonic::async_trait]
impl csi::identity_server::Identity for CsiNodeDriver {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: self.vendor_version.clone(),
            manifest: HashMap::new(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        use csi::plugin_capability::{Service, Type, service};
        let mut capabilities = Vec::new();
        if !self.topology.is_empty() {
            capabilities.push(csi::PluginCapability {
                r#type: Some(Type::Service(Service {
                    r#type: service::Type::VolumeAccessibilityConstraints as i32,
                })),
            });
        }
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for CsiNodeDriver {
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: vec![],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        if self.fail_node_get_info {
            return Err(Status::unavailable("node not ready"));
        }
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: self.max_volumes_per_node,
            accessible_topology: (!self.topology.is_empty()).then(|| csi::Topology {
                segments: self.topology.clone(),
            }),
        }))
    }
}

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
    name: String,
    vendor_version: String,
    node_id: String,
    max_volumes_per_node: i64,
    topology: HashMap<String, String>,
    /// Answer NodeGetInfo with UNAVAILABLE, for tests of failure handling.
    fail_node_get_info: bool,
}

impl CsiNodeDriver {
    /// Driver `name` (GetPluginInfo) on the node it knows as `node_id`
    /// (NodeGetInfo), with no volume limit and no topology.
    pub fn new(name: impl Into<String>, node_id: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            node_id: node_id.into(),
            vendor_version: env!("CARGO_PKG_VERSION").into(),
            ..Self::default()
        }
    }

    /// The vendor version GetPluginInfo reports.
    pub fn vendor_version(mut self, version: impl Into<String>) -> Self {
        self.vendor_version = version.into();
        self
    }

    /// Volumes attachable to the node (NodeGetInfo); 0 means no limit.
    pub fn max_volumes_per_node(mut self, max: i64) -> Self {
        self.max_volumes_per_node = max;
        self
    }

    /// A topology segment of the node (NodeGetInfo's accessible topology);
    /// any also advertises the VOLUME_ACCESSIBILITY_CONSTRAINTS capability.
    pub fn topology(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.topology.insert(key.into(), value.into());
        self
    }

    /// Answers NodeGetInfo with UNAVAILABLE, to exercise failure handling.
    #[cfg(feature = "test-util")]
    pub fn failing_node_get_info(mut self) -> Self {
        self.fail_node_get_info = true;
        self
    }

    /// The driver name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A tonic router serving Identity and Node.
    pub fn router(self) -> Router {
        crate::call_span::server(&self.name)
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

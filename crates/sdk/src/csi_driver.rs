//! A small CSI node driver server: Identity (GetPluginInfo,
//! GetPluginCapabilities, Probe) and Node, from a plain description:
//! registration (NodeGetCapabilities, NodeGetInfo) always, and with
//! [`volumes`](CsiNodeDriver::volumes) real volumes, each a directory of
//! the driver's staged and published by a bind mount, with their stats
//! (and, with [`expands`](CsiNodeDriver::expands), grown on the node).
//! Used by `example-csi-driver`, the fleet benchmark and tests; with
//! [`call_log`](CsiNodeDriver::call_log) it writes every node call it
//! serves, for tests that compare what two nodes asked.

mod call_log;
mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use nodeplugins_api::csi::v1 as csi;
use tonic::transport::server::Router;
use tonic::{Request, Response, Status};

use call_log::{CallLog, Logged};
use volumes::Volumes;

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
    /// The volumes it serves, if any.
    volumes: Option<Arc<Volumes>>,
    /// Whether it grows them on the node.
    expands: bool,
    /// Where the node calls are written, if anywhere.
    call_log: Option<Arc<CallLog>>,
    /// Node methods answered with an error, whatever is asked.
    failures: HashMap<String, tonic::Code>,
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

    /// Serves volumes, each a directory under `state_dir` bind-mounted
    /// where the node publishes it; `stages` advertises
    /// `STAGE_UNSTAGE_VOLUME` (a persistent volume must then be staged
    /// before it is published).
    pub fn volumes(mut self, state_dir: impl Into<PathBuf>, stages: bool) -> Self {
        self.volumes = Some(Arc::new(Volumes::new(state_dir.into(), stages)));
        self
    }

    /// Grows its volumes on the node (advertises `EXPAND_VOLUME`): a
    /// `NodeExpandVolume` of a volume it serves records the size asked.
    /// Only with [`volumes`](Self::volumes).
    pub fn expands(mut self) -> Self {
        self.expands = true;
        self
    }

    /// Appends every node call it serves to `path`, one JSON line each:
    /// `{"method", "request", "error"}` (secrets by key only).
    pub fn call_log(mut self, path: impl Into<PathBuf>) -> std::io::Result<Self> {
        self.call_log = Some(Arc::new(CallLog::open(&path.into())?));
        Ok(self)
    }

    /// Answers every call of node method `method` (`NodePublishVolume`...)
    /// with `code`, to try how a node handles a driver that fails: a
    /// `DeadlineExceeded` leaves the node unsure whether the call did its
    /// work, an `InvalidArgument` tells it that it did not.
    pub fn fail(mut self, method: impl Into<String>, code: tonic::Code) -> Self {
        self.failures.insert(method.into(), code);
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

impl CsiNodeDriver {
    fn logged<T>(
        &self,
        method: &str,
        request: &dyn Logged,
        answer: Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        if let Some(log) = &self.call_log {
            log.write(method, request, answer.as_ref().err());
        }
        answer.map(Response::new)
    }

    fn served_volumes(&self, method: &str) -> Result<&Volumes, Status> {
        if let Some(code) = self.failures.get(method) {
            return Err(Status::new(
                *code,
                format!("{method} fails here on purpose"),
            ));
        }
        self.volumes
            .as_deref()
            .ok_or_else(|| Status::unimplemented("this driver serves no volumes"))
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for CsiNodeDriver {
    async fn node_get_capabilities(
        &self,
        request: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        use csi::node_service_capability::{Rpc, Type, rpc};
        let mut types = Vec::new();
        if let Some(volumes) = &self.volumes {
            if volumes.stages {
                types.push(rpc::Type::StageUnstageVolume);
            }
            types.push(rpc::Type::GetVolumeStats);
            if self.expands {
                types.push(rpc::Type::ExpandVolume);
            }
        }
        let capabilities = types
            .into_iter()
            .map(|t| csi::NodeServiceCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
            })
            .collect();
        let answer = Ok(csi::NodeGetCapabilitiesResponse { capabilities });
        self.logged("NodeGetCapabilities", request.get_ref(), answer)
    }

    async fn node_get_info(
        &self,
        request: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        let answer = if self.fail_node_get_info {
            Err(Status::unavailable("node not ready"))
        } else {
            Ok(csi::NodeGetInfoResponse {
                node_id: self.node_id.clone(),
                max_volumes_per_node: self.max_volumes_per_node,
                accessible_topology: (!self.topology.is_empty()).then(|| csi::Topology {
                    segments: self.topology.clone(),
                }),
            })
        };
        self.logged("NodeGetInfo", request.get_ref(), answer)
    }

    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        let request = request.into_inner();
        let answer = self
            .served_volumes("NodeStageVolume")
            .and_then(|v| v.stage(&request))
            .map(|()| csi::NodeStageVolumeResponse {});
        self.logged("NodeStageVolume", &request, answer)
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        let request = request.into_inner();
        let answer = self
            .served_volumes("NodeUnstageVolume")
            .and_then(|v| v.unstage(&request))
            .map(|()| csi::NodeUnstageVolumeResponse {});
        self.logged("NodeUnstageVolume", &request, answer)
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let request = request.into_inner();
        let answer = self
            .served_volumes("NodePublishVolume")
            .and_then(|v| v.publish(&request))
            .map(|()| csi::NodePublishVolumeResponse {});
        self.logged("NodePublishVolume", &request, answer)
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let request = request.into_inner();
        let answer = self
            .served_volumes("NodeUnpublishVolume")
            .and_then(|v| v.unpublish(&request))
            .map(|()| csi::NodeUnpublishVolumeResponse {});
        self.logged("NodeUnpublishVolume", &request, answer)
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let request = request.into_inner();
        let answer = self
            .served_volumes("NodeGetVolumeStats")
            .and_then(|v| v.stats(&request))
            .map(|usage| csi::NodeGetVolumeStatsResponse { usage });
        self.logged("NodeGetVolumeStats", &request, answer)
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        let request = request.into_inner();
        let answer = if self.expands {
            self.served_volumes("NodeExpandVolume")
                .and_then(|v| v.expand(&request))
                .map(|capacity_bytes| csi::NodeExpandVolumeResponse { capacity_bytes })
        } else {
            Err(Status::unimplemented("this driver does not expand volumes"))
        };
        self.logged("NodeExpandVolume", &request, answer)
    }
}

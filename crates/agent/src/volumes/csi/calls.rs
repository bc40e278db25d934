//! A CSI driver's node calls, as the kubelet's CSI client makes them:
//! each on a connection of its own to the driver's socket (the one it
//! registered), through the call layer (the kubelet's `csiTimeout`, 2
//! min, as the deadline; a span naming the driver and the method), and
//! each failure told final or not (`isFinalError`): a driver that did
//! not answer, was unavailable or aborted may still be working on it, so
//! the volume is treated as possibly set up and torn down all the same.

use std::path::Path;
use std::time::Duration;

use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::call_layer::{CallLayer, CallService};
use nodeplugins_api::csi::v1 as csi;
use nodeplugins_api::csi::v1::node_client::NodeClient;
use nodeplugins_api::transport::{dial, root_cause};
use tonic::Code;
use tonic::transport::Channel;

use crate::csi::CsiDriverStore;
use crate::volumes::csi::operations::CsiOperations;

/// Every node call's deadline (`csiTimeout`).
pub(crate) const CSI_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call failed, and whether the driver is done with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CallFailure {
    /// What the kubelet would say.
    pub(crate) message: String,
    /// The driver is done with the call: it failed and changed nothing
    /// (false: it may still be at work, or the call never reached it).
    pub(crate) finished: bool,
}

impl CallFailure {
    fn unfinished(message: String) -> Self {
        Self {
            message,
            finished: false,
        }
    }

    fn of(error: &CallError) -> Self {
        let finished = !matches!(
            error.code(),
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Unavailable
                | Code::ResourceExhausted
                | Code::Aborted
        ) && !matches!(error, CallError::Timeout(_) | CallError::Disconnected);
        Self {
            message: format!(
                "rpc error: code = {:?} desc = {}",
                error.code(),
                error.message()
            ),
            finished,
        }
    }
}

/// The node capabilities a driver reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeCapabilities {
    /// `STAGE_UNSTAGE_VOLUME`.
    pub(crate) stage_unstage: bool,
    /// `GET_VOLUME_STATS`.
    pub(crate) volume_stats: bool,
    /// `EXPAND_VOLUME`.
    pub(crate) expand: bool,
    /// `SINGLE_NODE_MULTI_WRITER`: the access modes are mapped finer.
    pub(crate) single_node_multi_writer: bool,
    /// `VOLUME_MOUNT_GROUP`: the driver applies the fsGroup itself.
    pub(crate) volume_mount_group: bool,
}

/// One registered driver's node service.
#[derive(Debug, Clone)]
pub(crate) struct DriverCalls {
    driver: String,
    endpoint: String,
    operations: CsiOperations,
    /// The calls are for a migrated in-tree volume.
    migrated: bool,
}

impl DriverCalls {
    /// Driver `name`'s node service, when it is registered (the kubelet's
    /// words when not: a transient failure), its calls measured in
    /// `operations`.
    pub(crate) fn of(
        drivers: &CsiDriverStore,
        name: &str,
        operations: &CsiOperations,
    ) -> Result<Self, CallFailure> {
        match drivers.get(name) {
            Some(driver) => Ok(Self {
                driver: name.to_string(),
                endpoint: driver.endpoint,
                operations: operations.clone(),
                migrated: false,
            }),
            None => Err(CallFailure::unfinished(format!(
                "driver name {name} not found in the list of registered CSI drivers"
            ))),
        }
    }

    /// The same calls, counted as those of a migrated in-tree volume when
    /// `migrated` (the kubelet counts so its stage, publish and expand
    /// calls of one; never its unpublish or unstage, which know no spec).
    pub(crate) fn migrated(mut self, migrated: bool) -> Self {
        self.migrated = migrated;
        self
    }

    /// A client on a connection of its own.
    async fn client(&self) -> Result<NodeClient<CallService<Channel>>, CallFailure> {
        let path = Path::new(
            self.endpoint
                .strip_prefix("unix://")
                .unwrap_or(&self.endpoint),
        );
        let channel = dial(path, CSI_TIMEOUT).await.map_err(|e| {
            CallFailure::unfinished(format!(
                "cannot connect to CSI driver {} at {}: {}",
                self.driver,
                self.endpoint,
                root_cause(&e)
            ))
        })?;
        let layer = CallLayer::new("CSI driver", &self.endpoint)
            .deadline(CSI_TIMEOUT)
            .metrics(self.operations.of_driver(&self.driver, self.migrated));
        Ok(NodeClient::new(layer.service(channel)))
    }

    /// `NodeGetCapabilities`.
    pub(crate) async fn capabilities(&self) -> Result<NodeCapabilities, CallFailure> {
        use csi::node_service_capability::{Type, rpc};
        let mut client = self.client().await?;
        let answer = call::answer(client.node_get_capabilities(csi::NodeGetCapabilitiesRequest {}))
            .await
            .map_err(|e| CallFailure::of(&e))?;
        let mut capabilities = NodeCapabilities::default();
        for capability in answer.capabilities {
            let Some(Type::Rpc(rpc)) = capability.r#type else {
                continue;
            };
            match rpc::Type::try_from(rpc.r#type) {
                Ok(rpc::Type::StageUnstageVolume) => capabilities.stage_unstage = true,
                Ok(rpc::Type::GetVolumeStats) => capabilities.volume_stats = true,
                Ok(rpc::Type::ExpandVolume) => capabilities.expand = true,
                Ok(rpc::Type::SingleNodeMultiWriter) => {
                    capabilities.single_node_multi_writer = true;
                }
                Ok(rpc::Type::VolumeMountGroup) => capabilities.volume_mount_group = true,
                _ => {}
            }
        }
        Ok(capabilities)
    }

    /// `NodeStageVolume`.
    pub(crate) async fn stage(
        &self,
        request: csi::NodeStageVolumeRequest,
    ) -> Result<(), CallFailure> {
        let mut client = self.client().await?;
        call::answer(client.node_stage_volume(request))
            .await
            .map(|_| ())
            .map_err(|e| CallFailure::of(&e))
    }

    /// `NodePublishVolume`.
    pub(crate) async fn publish(
        &self,
        request: csi::NodePublishVolumeRequest,
    ) -> Result<(), CallFailure> {
        let mut client = self.client().await?;
        call::answer(client.node_publish_volume(request))
            .await
            .map(|_| ())
            .map_err(|e| CallFailure::of(&e))
    }

    /// `NodeUnpublishVolume` of `volume_id` at `target_path`.
    pub(crate) async fn unpublish(
        &self,
        volume_id: &str,
        target_path: &str,
    ) -> Result<(), CallFailure> {
        let mut client = self.client().await?;
        call::answer(
            client.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                volume_id: volume_id.to_string(),
                target_path: target_path.to_string(),
            }),
        )
        .await
        .map(|_| ())
        .map_err(|e| CallFailure::of(&e))
    }

    /// `NodeGetVolumeStats` of `volume_id` published at `volume_path`.
    pub(crate) async fn volume_stats(
        &self,
        volume_id: &str,
        volume_path: &str,
    ) -> Result<Vec<csi::VolumeUsage>, CallFailure> {
        let mut client = self.client().await?;
        call::answer(
            client.node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                volume_id: volume_id.to_string(),
                volume_path: volume_path.to_string(),
                staging_target_path: String::new(),
            }),
        )
        .await
        .map(|answer| answer.usage)
        .map_err(|e| CallFailure::of(&e))
    }

    /// `NodeExpandVolume`; the failure keeps its gRPC code, which tells
    /// the kubelet's expander how to record it.
    pub(crate) async fn expand(
        &self,
        request: csi::NodeExpandVolumeRequest,
    ) -> Result<(), (Option<Code>, CallFailure)> {
        let mut client = self.client().await.map_err(|e| (None, e))?;
        call::answer(client.node_expand_volume(request))
            .await
            .map(|_| ())
            .map_err(|e| (Some(e.code()), CallFailure::of(&e)))
    }

    /// `NodeUnstageVolume` of `volume_id` at `staging_target_path`.
    pub(crate) async fn unstage(
        &self,
        volume_id: &str,
        staging_target_path: &str,
    ) -> Result<(), CallFailure> {
        let mut client = self.client().await?;
        call::answer(client.node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_string(),
            staging_target_path: staging_target_path.to_string(),
        }))
        .await
        .map(|_| ())
        .map_err(|e| CallFailure::of(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    #[test]
    fn a_driver_that_may_still_be_at_work_has_not_finished() {
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::Aborted,
        ] {
            assert!(!CallFailure::of(&CallError::Status(Status::new(code, "x"))).finished);
        }
        assert!(!CallFailure::of(&CallError::Timeout(CSI_TIMEOUT)).finished);
        assert!(!CallFailure::of(&CallError::Disconnected).finished);
        let refused = CallFailure::of(&CallError::Status(Status::not_found("no volume v")));
        assert!(refused.finished);
        assert_eq!(
            refused.message,
            "rpc error: code = NotFound desc = no volume v"
        );
    }
}

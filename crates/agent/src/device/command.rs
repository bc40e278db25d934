//! What handles and the device manager's task exchange.

use std::path::PathBuf;
use std::sync::Arc;

use nodeplugins_api::deviceplugin::v1beta1::Device;
use tokio::sync::{broadcast, oneshot};

use super::allocate_error::AllocateError;
use super::allocate_steps::{Choice, Planned, ReservationId, ReservedChoices};
use super::config::DeviceManagerConfig;
use super::container_allocation::{AllocationRequest, ContainerAllocation};
use super::metrics::DeviceMetrics;
use super::plugin_client::{DeviceError, PluginClient, StreamEnd};
use super::resource::InstanceId;
use super::snapshot::DeviceSnapshot;
use crate::checkpoint::{CheckpointError, WrittenReply};
use crate::event::AgentEvent;
use crate::published::Store;

/// Whether a checkpoint write succeeded.
pub(crate) type WrittenResult = Result<(), Arc<CheckpointError>>;

/// What the manager's task is told.
pub(crate) enum Command {
    /// A dialed plugin instance to record.
    Connect {
        resource: String,
        plugin: PluginClient,
        reply: oneshot::Sender<Result<(), DeviceError>>,
    },
    /// Drop the instance of `resource` at `socket`.
    Disconnect { resource: String, socket: PathBuf },
    /// An instance sent its device list.
    DeviceList {
        resource: String,
        instance: InstanceId,
        devices: Vec<Device>,
    },
    /// An instance's ListAndWatch stream ended.
    StreamEnded {
        resource: String,
        instance: InstanceId,
        end: StreamEnd,
    },
    /// Allocation step 1.
    Plan {
        request: AllocationRequest,
        reply: oneshot::Sender<Result<Vec<Planned>, AllocateError>>,
    },
    /// Allocation step 3.
    Reserve {
        choices: Vec<Choice>,
        reply: oneshot::Sender<Result<ReservedChoices, AllocateError>>,
    },
    /// An allocation in progress failed.
    Unreserve { reservation: ReservationId },
    /// An allocation for `container` of pod `pod` failed, before or after
    /// its reservation: for operators.
    Failed {
        pod: String,
        container: String,
        error: AllocateError,
    },
    /// Allocation step 5; answered once on disk.
    Commit {
        reservation: ReservationId,
        allocations: Vec<ContainerAllocation>,
        reply: WrittenReply,
    },
    /// The instance to call for `resource` (its primary), for the calls
    /// made once devices are allocated (PreStartContainer).
    Instance {
        resource: String,
        reply: oneshot::Sender<Option<PluginClient>>,
    },
    /// Free a pod's devices; answered with the count at once and, when the
    /// count is not zero, with the end of the checkpoint write.
    Release {
        pod_uid: String,
        reply: oneshot::Sender<(usize, Option<oneshot::Receiver<WrittenResult>>)>,
    },
}

/// What the handle and the manager's task share.
pub(crate) struct Shared {
    pub(crate) config: DeviceManagerConfig,
    pub(crate) events: broadcast::Sender<AgentEvent>,
    /// The state after the latest change.
    pub(crate) store: Store<DeviceSnapshot>,
    pub(crate) metrics: DeviceMetrics,
}

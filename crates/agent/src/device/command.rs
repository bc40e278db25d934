//! What handles and the device manager's task exchange and share.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

use super::book::DeviceBook;
use super::config::DeviceManagerConfig;
use super::metrics::DeviceMetrics;
use super::resource::InstanceId;
use super::snapshot::DeviceSnapshot;
use crate::device::registration::plugin_client::StreamEnd;
use crate::event::AgentEvent;
use crate::published::Store;

/// What the manager's task is told: plugins leaving and their streams
/// ending. Plugins connecting, device lists, allocations and releases go
/// to the book.
pub(crate) enum Command {
    /// Drop the instance of `resource` at `socket`.
    Disconnect { resource: String, socket: PathBuf },
    /// An instance's ListAndWatch stream ended.
    StreamEnded {
        resource: String,
        instance: InstanceId,
        end: StreamEnd,
    },
}

/// What the handle and the manager's task share.
pub(crate) struct Shared {
    pub(crate) config: DeviceManagerConfig,
    pub(crate) events: broadcast::Sender<AgentEvent>,
    /// The state, which allocations and releases change in the caller's
    /// task.
    pub(crate) book: Arc<DeviceBook>,
    /// The state after the latest change.
    pub(crate) store: Store<DeviceSnapshot>,
    pub(crate) metrics: DeviceMetrics,
    /// The ListAndWatch streams and the checkpoint writer, waited for when
    /// the manager stops.
    pub(crate) tasks: TaskTracker,
}

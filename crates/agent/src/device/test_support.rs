//! For the tests of readers of the device manager (the pod-resources
//! views): a handle whose snapshots the test publishes, with no task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::command::Shared;
use super::config::DeviceManagerConfig;
use super::container_allocation::ContainerAllocation;
use super::handle::DeviceHandle;
use super::metrics::DeviceMetrics;
use super::snapshot::DeviceSnapshot;
use super::state::State;
use crate::owner::Mailbox;

/// A handle reading `snapshot` and `changes`; its commands go nowhere.
pub(crate) fn handle(
    snapshot: watch::Receiver<Arc<DeviceSnapshot>>,
    changes: watch::Receiver<u64>,
) -> DeviceHandle {
    let (commands, _) = Mailbox::new();
    DeviceHandle {
        commands,
        shared: Arc::new(Shared {
            config: DeviceManagerConfig::new("/nonexistent"),
            events: broadcast::channel(1).0,
            changes,
            snapshot,
            metrics: DeviceMetrics::default(),
        }),
    }
}

/// What a running manager publishes as its `generation`th snapshot when
/// it holds `allocations` and no resource.
pub(crate) fn snapshot(generation: u64, allocations: Vec<ContainerAllocation>) -> DeviceSnapshot {
    let mut state = State::default();
    for a in allocations {
        state.allocator.restore(a);
    }
    let mut snapshot = DeviceSnapshot::of(&state, Duration::ZERO, None);
    snapshot.generation = generation;
    snapshot
}

//! For the tests of readers of the device manager (the pod-resources
//! views): a handle whose snapshots the test publishes, with no task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::book::DeviceBook;
use super::command::Shared;
use super::config::DeviceManagerConfig;
use super::handle::DeviceHandle;
use super::metrics::DeviceMetrics;
use super::snapshot::DeviceSnapshot;
use super::state::State;
use crate::common::owner::Mailbox;
use crate::device::allocation::container_allocation::ContainerAllocation;
use crate::published::Store;

/// A handle reading what `store`'s publisher publishes; its commands go
/// nowhere, and its book is never loaded.
pub(crate) fn handle(store: Store<DeviceSnapshot>) -> DeviceHandle {
    let (commands, _) = Mailbox::new();
    DeviceHandle {
        commands,
        shared: Arc::new(Shared {
            config: DeviceManagerConfig::new("/nonexistent"),
            events: broadcast::channel(1).0,
            book: Arc::new(DeviceBook::new(Duration::ZERO, broadcast::channel(1).0)),
            store,
            metrics: DeviceMetrics::default(),
            tasks: tokio_util::task::TaskTracker::new(),
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

//! What the device manager knows, owned by its task: the resources (each
//! with its plugin instances and devices, [`super::resource`]) and who
//! holds which of their devices ([`crate::device::allocation::allocator`]); what it brings back
//! from the checkpoint, what it records there, and when a resource without
//! a plugin is forgotten.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::checkpoint::{CheckpointData, DeviceCheckpoint};
use super::resource::{InstanceId, Resource, is_healthy};
use crate::device::allocation::allocator::Allocator;

/// Everything the device manager knows.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) resources: BTreeMap<String, Resource>,
    pub(crate) next_instance: InstanceId,
    /// Who holds which devices.
    pub(crate) allocator: Allocator,
}

impl State {
    /// Brings back what checkpoint `data` holds: its allocations, and each
    /// resource it names, waiting (stopped since `now`) for its plugin.
    pub(crate) fn restore(&mut self, data: DeviceCheckpoint, now: Instant) {
        for allocation in data.allocations {
            self.allocator.restore(allocation);
        }
        let resources = data.registered_devices.len();
        for name in data.registered_devices.into_keys() {
            self.resources.entry(name).or_default().stopped_since = Some(now);
        }
        tracing::info!(
            allocations = self.allocator.len(),
            resources,
            "device checkpoint restored"
        );
    }

    /// When the first resource without a plugin is due to be forgotten,
    /// `grace` after it stopped.
    pub(crate) fn next_expiry(&self, grace: Duration) -> Option<Instant> {
        self.resources
            .values()
            .filter(|r| r.instances.is_empty())
            .filter_map(|r| r.stopped_since)
            .min()
            .map(|since| since + grace)
    }

    /// Forgets every resource without a plugin whose grace period is over
    /// at `now`; returns their names.
    pub(crate) fn expire(&mut self, now: Instant, grace: Duration) -> Vec<String> {
        let due: Vec<String> = self
            .resources
            .iter()
            .filter(|(_, r)| r.instances.is_empty())
            .filter(|(_, r)| r.stopped_since.is_some_and(|since| since + grace <= now))
            .map(|(name, _)| name.clone())
            .collect();
        for resource in &due {
            self.resources.remove(resource);
        }
        due
    }

    /// What the checkpoint records: the allocations (shared, not copied)
    /// and each resource's healthy devices.
    pub(crate) fn checkpoint_data(&self) -> CheckpointData {
        CheckpointData {
            allocations: self.allocator.allocations().cloned().collect(),
            registered_devices: self.healthy_devices(),
        }
    }

    /// Resource → ids of its healthy devices, as the checkpoint records them.
    pub(crate) fn healthy_devices(&self) -> BTreeMap<String, Vec<String>> {
        self.resources
            .iter()
            .map(|(name, r)| {
                let healthy = r
                    .devices()
                    .values()
                    .filter(|d| is_healthy(d))
                    .map(|d| d.id.clone())
                    .collect();
                (name.clone(), healthy)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

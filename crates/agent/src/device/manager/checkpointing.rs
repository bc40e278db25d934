//! The device manager's checkpoint: what is written (resources and
//! allocations), undoing the allocations whose write failed, and the restore
//! at start.

use super::*;

impl Owner {
    /// A checkpoint write ended: the allocations waiting for it are
    /// answered, and undone if it failed. Says whether the state (or the
    /// checkpoint's problem) changed.
    pub(super) fn on_written(&mut self, written: Written) -> bool {
        let failed_before = self.persister.last_error().is_some();
        let Err((e, undo)) = self.persister.on_written(written) else {
            return failed_before;
        };
        tracing::error!(error = %e, "cannot write the device checkpoint");
        let changed = true;
        let mut undone = false;
        for (key, allocation) in undo.iter().flatten() {
            if self
                .state
                .allocations
                .get(key)
                .is_some_and(|a| Arc::ptr_eq(a, allocation))
            {
                self.state.allocations.remove(key);
                undone = true;
            }
        }
        if undone {
            self.persister.changed();
        }
        changed
    }

    /// Brings back what the checkpoint holds.
    pub(super) fn restore(&mut self, loaded: Loaded<DeviceCheckpoint>) {
        if let Some(recovered) = loaded.recovered {
            tracing::warn!("{recovered}");
            self.load_problem = Some(CheckpointProblem::Recovered(Arc::new(recovered)));
        }
        let now = Instant::now();
        for allocation in loaded.data.allocations {
            let key = (
                allocation.pod_uid.clone(),
                allocation.container.clone(),
                allocation.resource.clone(),
            );
            self.state.allocations.insert(key, Arc::new(allocation));
        }
        let resources = loaded.data.registered_devices.len();
        for name in loaded.data.registered_devices.into_keys() {
            self.state.resources.entry(name).or_default().stopped_since = Some(now);
        }
        tracing::info!(
            allocations = self.state.allocations.len(),
            resources,
            "device checkpoint restored"
        );
    }
}

//! What the device manager knows, shared by its task and every caller: the
//! state ([`State`]: resources, devices, who holds them), its checkpoint and
//! its published snapshot, under one lock. A plugin connecting is recorded,
//! and its device lists applied, by the handle that dialed it and the
//! task that follows its stream; the manager's task changes it as plugins
//! leave and grace periods end; an allocation and a release change it in
//! the caller's task, as the kubelet's device manager
//! changes its state under its mutex, so that no allocation waits behind
//! the task's work (a plugin's burst of device lists, say). The lock is
//! held for one decision, never across a plugin call or a write; each
//! change is published before the lock is let go, and written to the
//! checkpoint in the background. A caller that must not go on before its
//! change is on disk waits for the write that holds it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nodeplugins_api::deviceplugin::v1beta1::Device;
use tokio::sync::{broadcast, oneshot};

use super::checkpoint::CheckpointData;
use super::resource::{AllocationKey, Devices, Instance, InstanceId};
use super::snapshot::DeviceSnapshot;
use super::state::State;
use crate::checkpoint::{Ends, Persister, WriteDone, Written, write_out};
use crate::device::allocation::allocate_error::AllocateError;
use crate::device::allocation::allocate_steps::{Choice, Planned, ReservationId, ReservedChoices};
use crate::device::allocation::container_allocation::{AllocationRequest, ContainerAllocation};
use crate::device::registration::plugin_client::{DeviceError, PluginClient};
use crate::event::{AgentEvent, EventKind};
use crate::published::Publisher;

/// What a failed write undoes: the allocations it was to hold.
pub(crate) type Undo = Vec<(AllocationKey, Arc<ContainerAllocation>)>;

/// The device manager's state, its checkpoint and its snapshot.
pub(crate) struct DeviceBook {
    inner: Mutex<Book>,
    events: broadcast::Sender<AgentEvent>,
}

/// What the lock holds.
pub(crate) struct Book {
    /// Everything the manager knows.
    pub(crate) state: State,
    /// Writes the checkpoint, once the manager runs; an allocation waiting
    /// for a write that fails is undone.
    persister: Option<Persister<CheckpointData, Undo>>,
    /// The state after every change, for readers, once the manager runs
    /// (before, the manager holds it: dropped unrun, it tells readers).
    snapshot: Option<Publisher<DeviceSnapshot>>,
    /// How long a resource without a plugin is kept.
    grace: Duration,
    /// The manager stopped: no plugin connects any more.
    stopped: bool,
}

impl DeviceBook {
    /// An empty book, not running until [`Book::load`], keeping resources
    /// without a plugin for `grace` and telling operators through `events`.
    pub(crate) fn new(grace: Duration, events: broadcast::Sender<AgentEvent>) -> Self {
        Self {
            inner: Mutex::new(Book {
                state: State::default(),
                persister: None,
                snapshot: None,
                grace,
                stopped: false,
            }),
            events,
        }
    }

    /// The lock every change takes. Each change is one call into the state
    /// while it is held, so a panic elsewhere leaves nothing half done.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Book> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells operators.
    pub(crate) fn emit(
        &self,
        kind: EventKind,
        resource: &str,
        endpoint: Option<&std::path::Path>,
        detail: Option<String>,
    ) {
        let _ = self
            .events
            .send(AgentEvent::device(kind, resource, endpoint, detail));
    }

    /// Allocation step 1 (see [`crate::device::allocation::allocator::Allocator::plan`]).
    pub(crate) fn plan(&self, request: &AllocationRequest) -> Result<Vec<Planned>, AllocateError> {
        let book = self.lock();
        book.state.allocator.plan(&book.state.resources, request)
    }

    /// Allocation step 3: the choices reserved, or none; published.
    pub(crate) fn reserve(&self, choices: Vec<Choice>) -> Result<ReservedChoices, AllocateError> {
        let mut book = self.lock();
        let book = &mut *book;
        let reserved = book
            .state
            .allocator
            .reserve(&book.state.resources, choices)?;
        book.publish();
        Ok(reserved)
    }

    /// An allocation in progress failed: its devices are free again.
    pub(crate) fn unreserve(&self, reservation: ReservationId) {
        let mut book = self.lock();
        if book.state.allocator.unreserve(reservation) {
            book.publish();
        }
    }

    /// Allocation step 5: the reservation becomes `allocations`, published
    /// and told to operators at once; the end of the write that holds them
    /// (a failed write undoes them).
    pub(crate) fn commit(
        &self,
        reservation: ReservationId,
        allocations: Vec<ContainerAllocation>,
    ) -> Result<WriteDone, AllocateError> {
        let mut book = self.lock();
        if book.persister.is_none() {
            // The manager stopped: nothing is recorded any more.
            book.state.allocator.unreserve(reservation);
            return Err(AllocateError::Stopping);
        }
        let stored = book.state.allocator.commit(reservation, allocations);
        for (_, a) in &stored {
            tracing::info!(pod = %a.pod_uid, container = %a.container, resource = %a.resource,
                devices = ?a.devices, "devices allocated");
            self.emit(
                EventKind::Allocated,
                &a.resource,
                None,
                Some(format!(
                    "pod {} container {}: {}",
                    a.pod_uid,
                    a.container,
                    a.devices.join(",")
                )),
            );
        }
        let written = book.when_written(stored);
        book.publish();
        written.ok_or(AllocateError::Stopping)
    }

    /// Frees every device pod `pod_uid` holds: how many (container,
    /// resource) allocations ended and, when any did, the end of the write.
    pub(crate) fn release(&self, pod_uid: &str) -> (usize, Option<WriteDone>) {
        let mut book = self.lock();
        let released = book.state.allocator.release(pod_uid);
        if released == 0 {
            return (0, None);
        }
        tracing::info!(pod = %pod_uid, released, "devices released");
        self.emit(
            EventKind::Released,
            "",
            None,
            Some(format!("pod {pod_uid}: {released} allocation(s)")),
        );
        let written = book.when_written(Vec::new());
        book.publish();
        (released, written)
    }

    /// Records instance `id`'s device list for `resource`, published at
    /// once, and queues a checkpoint write without holding anything up:
    /// device health protects nothing on disk, and a burst of lists is
    /// written once, with the newest state.
    pub(crate) fn device_list(&self, resource: &str, id: InstanceId, devices: Vec<Device>) {
        let mut book = self.lock();
        let Some(entry) = book.state.resources.get_mut(resource) else {
            return;
        };
        let before = entry.counts();
        let Some(instance) = entry.instances.get_mut(&id) else {
            return;
        };
        instance.devices = Some(Arc::new(
            devices.into_iter().map(|d| (d.id.clone(), d)).collect(),
        ));
        entry.last_known = Devices::default();
        let after = entry.counts();
        if before != after {
            self.emit(
                EventKind::DevicesChanged,
                resource,
                None,
                Some(format!("{} healthy of {}", after.0, after.1)),
            );
        }
        // Readers first: the write only copies the state for the writer.
        book.changed();
        book.publish();
        book.flush();
    }

    /// Records instance `plugin` of `resource`, dialed and asked for its
    /// options (the newest instance becomes primary), and publishes it.
    /// Refused when an instance at its socket is recorded already, and
    /// once the manager stopped.
    pub(crate) fn connect(
        &self,
        resource: &str,
        plugin: &PluginClient,
    ) -> Result<InstanceId, DeviceError> {
        let mut book = self.lock();
        if book.stopped {
            return Err(DeviceError::Stopping);
        }
        let socket = plugin.socket();
        let state = &mut book.state;
        let entry = state.resources.entry(resource.to_string()).or_default();
        if entry
            .instances
            .values()
            .any(|i| i.plugin.socket() == socket)
        {
            return Err(DeviceError::AlreadyConnected {
                resource: resource.to_string(),
                socket: socket.display().to_string(),
            });
        }
        entry.stopped_since = None;
        state.next_instance += 1;
        let id = state.next_instance;
        if let Some(entry) = state.resources.get_mut(resource) {
            entry.instances.insert(
                id,
                Instance {
                    plugin: plugin.clone(),
                    connected_at: std::time::SystemTime::now(),
                    devices: None,
                },
            );
        }
        let options = plugin.options();
        tracing::info!(%resource, socket = %socket.display(), pre_start = options.pre_start_required,
            preferred_allocation = options.get_preferred_allocation_available, "device plugin connected");
        self.emit(EventKind::Connected, resource, Some(socket), None);
        book.publish();
        Ok(id)
    }

    /// The manager stops: no plugin connects from now on; returns the
    /// instances connected, for the manager to disconnect.
    pub(crate) fn stop(&self) -> Vec<PluginClient> {
        let mut book = self.lock();
        book.stopped = true;
        book.state
            .resources
            .values()
            .flat_map(|r| r.instances.values())
            .map(|i| i.plugin.clone())
            .collect()
    }

    /// The instance to call for `resource` (its primary), for the calls
    /// made once devices are allocated (PreStartContainer).
    pub(crate) fn instance(&self, resource: &str) -> Option<PluginClient> {
        let book = self.lock();
        let (_, instance) = book.state.resources.get(resource)?.primary()?;
        Some(instance.plugin.clone())
    }

    /// Writes what is not written yet and waits for it (`ends`: its
    /// persister's), then stops writing: the manager's last act. Changes
    /// made after it are refused or not written.
    pub(crate) async fn finish(&self, ends: &mut Ends) {
        let flush = || {
            let mut book = self.lock();
            book.flush();
            book.persister.as_ref().is_some_and(Persister::writing)
        };
        write_out(ends, flush, |written| {
            self.lock().on_written(written);
        })
        .await;
        // Its writer ends with it.
        self.lock().persister = None;
    }
}

impl Book {
    /// The manager runs: the state is written by `persister` from now on,
    /// whose ends go to [`Self::on_written`], and published through
    /// `snapshot`.
    pub(crate) fn load(
        &mut self,
        persister: Persister<CheckpointData, Undo>,
        snapshot: Publisher<DeviceSnapshot>,
    ) {
        self.persister = Some(persister);
        self.snapshot = Some(snapshot);
    }

    /// Publishes the state: a new snapshot, and a new change count.
    pub(crate) fn publish(&mut self) {
        let Some(publisher) = &self.snapshot else {
            return;
        };
        let problem = self.persister.as_ref().and_then(Persister::problem);
        let mut snapshot = DeviceSnapshot::of(&self.state, self.grace, problem);
        snapshot.generation = publisher.current().generation + 1;
        publisher.publish(snapshot);
    }

    /// Marks the state changed for the checkpoint, with nobody waiting for
    /// the write (device lists: health protects nothing on disk, and a burst
    /// of lists is written once, with the newest state).
    pub(crate) fn changed(&mut self) {
        if let Some(persister) = &mut self.persister {
            persister.changed();
        }
    }

    /// Hands the state to the writer if it changed since the last write
    /// and none runs.
    pub(crate) fn flush(&mut self) {
        if let Some(persister) = &mut self.persister {
            let state = &self.state;
            persister.flush(|| state.checkpoint_data());
        }
    }

    /// A checkpoint write ended: the allocations waiting for it are
    /// answered, and undone if it failed; the changes made meanwhile go to
    /// the writer. Says whether the state (or the checkpoint's problem)
    /// changed, for the caller to publish.
    pub(crate) fn on_written(&mut self, written: Written) -> bool {
        let Some(persister) = &mut self.persister else {
            return false;
        };
        let failed_before = persister.last_error().is_some();
        let changed = match persister.on_written(written) {
            Ok(()) => failed_before,
            Err((e, undo)) => {
                tracing::error!(error = %e, "cannot write the device checkpoint");
                let committed: Vec<_> = undo.into_iter().flatten().collect();
                if self.state.allocator.undo(&committed) {
                    persister.changed();
                }
                true
            }
        };
        self.flush();
        changed
    }

    /// The end of the write holding the state as it is now (none once the
    /// manager stopped); the write starts now unless one runs, which
    /// leaves it to the next.
    fn when_written(&mut self, undo: Undo) -> Option<WriteDone> {
        let persister = self.persister.as_mut()?;
        let (reply, done) = oneshot::channel();
        let version = persister.changed();
        persister.when_written(version, reply, undo);
        self.flush();
        Some(done)
    }
}

#[cfg(test)]
mod tests;

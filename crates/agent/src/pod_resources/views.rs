//! The views the server answers from, published by a task of their own
//! after every change of the managers' snapshots, as every subsystem
//! publishes its state: callers read the latest view and never build one.
//! A build encodes again only the pods the change touched (and the
//! allocatable devices only when a device list changed). Nothing asks a
//! manager's task, so no client, however slow, holds up a manager.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::view::{self, PodCache, PodView};
use crate::device::DeviceHandle;
use crate::dra::DraHandle;

/// A manager stopped: the agent is shutting down.
#[derive(Debug)]
pub(crate) struct Stopped;

/// The answers of one moment, and which snapshots they were built from.
pub(crate) struct Views {
    /// The device snapshot's generation.
    devices: u64,
    /// The prepared claims' generation.
    claims: u64,
    /// `List` and `Get`.
    pub(crate) pods: Arc<PodView>,
    /// `GetAllocatableResources`, encoded.
    pub(crate) allocatable: Bytes,
}

/// The task that builds the views and publishes them.
pub(crate) struct ViewBuilder {
    devices: DeviceHandle,
    dra: DraHandle,
    published: watch::Sender<Option<Arc<Views>>>,
}

/// Reads the published views. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ViewsHandle {
    devices: DeviceHandle,
    dra: DraHandle,
    published: watch::Receiver<Option<Arc<Views>>>,
}

impl ViewBuilder {
    /// The builder of `devices`' and `dra`'s views, and its handle.
    pub(crate) fn new(devices: DeviceHandle, dra: DraHandle) -> (Self, ViewsHandle) {
        let published = watch::channel(None).0;
        let handle = ViewsHandle {
            devices: devices.clone(),
            dra: dra.clone(),
            published: published.subscribe(),
        };
        let builder = Self {
            devices,
            dra,
            published,
        };
        (builder, handle)
    }

    /// Once both managers have read their checkpoints, builds and publishes
    /// the views after every change, until `shutdown` or until a manager
    /// stops (which readers then see).
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        let mut device_changes = self.devices.changes();
        let mut claims = self.dra.claims();
        let started = async {
            let devices = self.devices.running_snapshot().await.ok()?;
            self.dra.loaded_claims().await.ok()?;
            Some(devices)
        };
        let mut devices = tokio::select! {
            () = shutdown.cancelled() => return,
            started = started => match started {
                Some(devices) => devices,
                None => return,
            },
        };
        let mut pods = PodCache::default();
        let mut allocatable = view::allocatable(&devices.allocatable());
        loop {
            // Marked seen before reading, so a change made meanwhile wakes
            // the next round.
            device_changes.borrow_and_update();
            let current = claims.borrow_and_update().clone();
            let latest = self.devices.snapshot();
            if !latest.same_devices(&devices) {
                allocatable = view::allocatable(&latest.allocatable());
            }
            devices = latest;
            let views = Views {
                devices: devices.generation,
                claims: current.generation(),
                pods: Arc::new(pods.view(devices.allocations(), current.iter())),
                allocatable: allocatable.clone(),
            };
            // Not kept: the DRA manager changes its claims in place when no
            // reader holds them.
            drop(current);
            self.published.send_replace(Some(Arc::new(views)));
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = device_changes.changed() => if changed.is_err() { return },
                changed = claims.changed() => if changed.is_err() { return },
            }
        }
    }
}

impl ViewsHandle {
    /// The views of now: built from the snapshots published when this was
    /// called, or later ones.
    pub(crate) async fn views(&self) -> Result<Arc<Views>, Stopped> {
        let devices = self.devices.running_snapshot().await.map_err(|_| Stopped)?;
        let claims = self.dra.loaded_claims().await.map_err(|_| Stopped)?;
        let (devices, claims) = (devices.generation, claims.generation());
        let mut published = self.published.clone();
        let views = published
            .wait_for(|views| {
                views
                    .as_ref()
                    .is_some_and(|v| v.devices >= devices && v.claims >= claims)
            })
            .await
            .map_err(|_| Stopped)?;
        views.clone().ok_or(Stopped)
    }
}

#[cfg(test)]
mod tests;

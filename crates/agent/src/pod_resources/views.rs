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
use crate::pods::PodsSnapshot;
use crate::published::{Closed, Publisher, Ready, Store};

/// What the builder publishes: nothing until both managers have read their
/// checkpoints, then the views of each moment.
#[derive(Default)]
pub(crate) struct Published(Option<Arc<Views>>);

impl Ready for Published {
    fn ready(&self) -> bool {
        self.0.is_some()
    }
}

/// The answers of one moment, and which snapshots they were built from.
pub(crate) struct Views {
    /// The device snapshot's generation.
    devices: u64,
    /// The prepared claims' generation.
    claims: u64,
    /// The pods snapshot's generation (0 when pods are not served).
    pods: u64,
    /// `List` and `Get`.
    pub(crate) list: Arc<PodView>,
    /// `GetAllocatableResources`, encoded.
    pub(crate) allocatable: Bytes,
}

/// The task that builds the views and publishes them.
pub(crate) struct ViewBuilder {
    devices: DeviceHandle,
    dra: DraHandle,
    /// The pods owner's pods, when pods are served: then the views show
    /// exactly the admitted pods.
    pods: Option<watch::Receiver<Arc<PodsSnapshot>>>,
    published: Publisher<Published>,
}

/// Reads the published views. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ViewsHandle {
    devices: DeviceHandle,
    dra: DraHandle,
    pods: Option<watch::Receiver<Arc<PodsSnapshot>>>,
    published: Store<Published>,
}

impl ViewBuilder {
    /// The builder of `devices`' and `dra`'s views (of the admitted pods of
    /// `pods`, when pods are served), and its handle.
    pub(crate) fn new(
        devices: DeviceHandle,
        dra: DraHandle,
        pods: Option<watch::Receiver<Arc<PodsSnapshot>>>,
    ) -> (Self, ViewsHandle) {
        let (published, store) = Publisher::new(Published::default());
        let handle = ViewsHandle {
            devices: devices.clone(),
            dra: dra.clone(),
            pods: pods.clone(),
            published: store,
        };
        let builder = Self {
            devices,
            dra,
            pods,
            published,
        };
        (builder, handle)
    }

    /// Once both managers have read their checkpoints, builds and publishes
    /// the views after every change, until `shutdown` or until a manager
    /// stops (which readers then see).
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut device_changes = self.devices.changes();
        let mut claims = self.dra.claims();
        let mut pods = self.pods.take();
        let started = async {
            let devices = self.devices.running_snapshot().await.ok()?;
            self.dra.loaded_claims().await.ok()?;
            if let Some(pods) = &mut pods {
                pods.wait_for(|p| p.running()).await.ok()?;
            }
            Some(devices)
        };
        let mut devices = tokio::select! {
            () = shutdown.cancelled() => return,
            started = started => match started {
                Some(devices) => devices,
                None => return,
            },
        };
        let mut cache = PodCache::default();
        let mut allocatable = view::allocatable(&devices.allocatable());
        loop {
            // Marked seen before reading, so a change made meanwhile wakes
            // the next round.
            device_changes.borrow_and_update();
            let current = claims.borrow_and_update().clone();
            let admitted = pods.as_mut().map(|p| p.borrow_and_update().clone());
            let latest = self.devices.snapshot();
            if !latest.same_devices(&devices) {
                allocatable = view::allocatable(&latest.allocatable());
            }
            devices = latest;
            let views = Views {
                devices: devices.generation,
                claims: current.generation(),
                pods: admitted.as_ref().map_or(0, |p| p.generation),
                list: Arc::new(cache.view(
                    devices.allocations(),
                    current.iter(),
                    admitted.as_deref(),
                )),
                allocatable: allocatable.clone(),
            };
            // Not kept: the DRA manager changes its claims in place when no
            // reader holds them.
            drop(current);
            self.published.publish(Published(Some(Arc::new(views))));
            let pods_changed = async {
                match &mut pods {
                    Some(pods) => pods.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = device_changes.changed() => if changed.is_err() { return },
                changed = claims.changed() => if changed.is_err() { return },
                changed = pods_changed => if changed.is_err() { return },
            }
        }
    }
}

impl ViewsHandle {
    /// The views of now: built from the snapshots published when this was
    /// called, or later ones.
    pub(crate) async fn views(&self) -> Result<Arc<Views>, Closed> {
        let devices = self.devices.running_snapshot().await.map_err(|_| Closed)?;
        let claims = self.dra.loaded_claims().await.map_err(|_| Closed)?;
        let (devices, claims) = (devices.generation, claims.generation());
        let pods = self.pods.as_ref().map_or(0, |p| p.borrow().generation);
        let published = self
            .published
            .wait_until(|p| {
                p.0.as_ref()
                    .is_some_and(|v| v.devices >= devices && v.claims >= claims && v.pods >= pods)
            })
            .await?;
        published.0.clone().ok_or(Closed)
    }
}

#[cfg(test)]
mod tests;

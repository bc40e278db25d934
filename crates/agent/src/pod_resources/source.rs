//! The views the server answers from, built again only after the device
//! manager or the DRA manager changed: an idle node costs nothing, a burst
//! of calls after a change builds once, and a build encodes again only the
//! pods the change touched. Building asks the device manager's task for its
//! allocations (shared, not copied); everything else happens in the caller,
//! so no client, however slow, holds up a manager.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{Mutex, watch};

use super::view::{PodCache, PodView, allocatable};
use crate::device::DeviceHandle;
use crate::dra::{DraHandle, PreparedClaims};

/// A manager stopped: the agent is shutting down.
#[derive(Debug)]
pub(crate) struct Stopped;

/// The last views and what they were built from.
#[derive(Default)]
struct Cached {
    /// The pods' answers, kept between views.
    pods: PodCache,
    /// The device manager's change count and the claims the view was built
    /// from, and the view.
    view: Option<(u64, Arc<PreparedClaims>, Arc<PodView>)>,
    /// The device manager's change count and `GetAllocatableResources`.
    allocatable: Option<(u64, Bytes)>,
}

/// Builds and caches the views.
pub(crate) struct ViewSource {
    devices: DeviceHandle,
    device_changes: watch::Receiver<u64>,
    dra: DraHandle,
    cached: Mutex<Cached>,
}

impl ViewSource {
    pub(crate) fn new(devices: DeviceHandle, dra: DraHandle) -> Self {
        Self {
            device_changes: devices.changes(),
            devices,
            dra,
            cached: Mutex::new(Cached::default()),
        }
    }

    /// The pods of now, once both managers have read their checkpoints.
    pub(crate) async fn view(&self) -> Result<Arc<PodView>, Stopped> {
        let mut cached = self.cached.lock().await;
        // Read before asking: a change in between makes the next call build
        // again, never serve a stale view.
        let version = *self.device_changes.borrow();
        let claims = self.dra.loaded_claims().await.map_err(|_| Stopped)?;
        if let Some((v, c, view)) = &cached.view
            && *v == version
            && Arc::ptr_eq(c, &claims)
        {
            return Ok(view.clone());
        }
        // The device manager answers once its checkpoint is restored.
        let allocations = self
            .devices
            .allocation_snapshot()
            .await
            .map_err(|_| Stopped)?;
        let view = Arc::new(cached.pods.view(&allocations, claims.iter()));
        cached.view = Some((version, claims, view.clone()));
        Ok(view)
    }

    /// `GetAllocatableResources` of now, encoded.
    pub(crate) async fn allocatable(&self) -> Result<Bytes, Stopped> {
        let mut cached = self.cached.lock().await;
        let version = *self.device_changes.borrow();
        if let Some((v, answer)) = &cached.allocatable
            && *v == version
        {
            return Ok(answer.clone());
        }
        let devices = self.devices.allocatable().await.map_err(|_| Stopped)?;
        let answer = allocatable(&devices);
        cached.allocatable = Some((version, answer.clone()));
        Ok(answer)
    }
}

//! The views the server answers from, built from the managers' snapshots
//! and again only after one changed: an idle node costs nothing, a burst of
//! calls after a change builds once, and a build encodes again only the
//! pods the change touched. Nothing asks a manager's task: the snapshots
//! are read where they are published, so no client, however slow, holds up
//! a manager.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::view::{PodCache, PodView, allocatable};
use crate::device::{DeviceHandle, DeviceSnapshot};
use crate::dra::{DraHandle, PreparedClaims};

/// A manager stopped: the agent is shutting down.
#[derive(Debug)]
pub(crate) struct Stopped;

/// The last views and what they were built from.
#[derive(Default)]
struct Cached {
    /// The pods' answers, kept between views.
    pods: PodCache,
    /// The snapshots the view was built from, and the view.
    view: Option<(Arc<DeviceSnapshot>, Arc<PreparedClaims>, Arc<PodView>)>,
    /// The snapshot `GetAllocatableResources` was encoded from, and it.
    allocatable: Option<(Arc<DeviceSnapshot>, Bytes)>,
}

/// Builds and caches the views.
pub(crate) struct ViewSource {
    devices: DeviceHandle,
    dra: DraHandle,
    cached: Mutex<Cached>,
}

impl ViewSource {
    pub(crate) fn new(devices: DeviceHandle, dra: DraHandle) -> Self {
        Self {
            devices,
            dra,
            cached: Mutex::new(Cached::default()),
        }
    }

    /// The pods of now, once both managers have read their checkpoints.
    pub(crate) async fn view(&self) -> Result<Arc<PodView>, Stopped> {
        let devices = self.devices.running_snapshot().await.map_err(|_| Stopped)?;
        let claims = self.dra.loaded_claims().await.map_err(|_| Stopped)?;
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((d, c, view)) = &cached.view
            && Arc::ptr_eq(d, &devices)
            && Arc::ptr_eq(c, &claims)
        {
            return Ok(view.clone());
        }
        let view = Arc::new(cached.pods.view(devices.allocations(), claims.iter()));
        cached.view = Some((devices, claims, view.clone()));
        Ok(view)
    }

    /// `GetAllocatableResources` of now, encoded.
    pub(crate) async fn allocatable(&self) -> Result<Bytes, Stopped> {
        let devices = self.devices.running_snapshot().await.map_err(|_| Stopped)?;
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((d, answer)) = &cached.allocatable
            && Arc::ptr_eq(d, &devices)
        {
            return Ok(answer.clone());
        }
        let answer = allocatable(&devices.allocatable());
        cached.allocatable = Some((devices, answer.clone()));
        Ok(answer)
    }
}

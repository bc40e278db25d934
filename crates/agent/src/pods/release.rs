//! Giving back what a pod held, once it ended or went: its claims
//! unprepared (a claim with its last pod; the others only forget it) and
//! its devices released. Both are asked of their managers, which decide;
//! the devices go back even when a driver fails to unprepare, as the
//! kubelet frees devices and unprepares claims apart.

use crate::device::DeviceHandle;
use crate::dra::{DraError, DraHandle};

/// Why what a pod held was not all given back.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReleaseError {
    /// The DRA manager refused.
    #[error(transparent)]
    Dra(#[from] DraError),
    /// Drivers failed to unprepare claims; they stay recorded for the pod.
    #[error("{}", .0.join("; "))]
    Unprepare(Vec<String>),
    /// A manager stopped: the agent is shutting down.
    #[error("the agent is stopping")]
    Stopping,
}

/// Gives back what pod `uid` holds: unprepares its claims, releases its
/// devices.
pub(crate) async fn release(
    devices: &DeviceHandle,
    dra: &DraHandle,
    uid: &str,
) -> Result<(), ReleaseError> {
    let claims = dra.unprepare_pod(uid).await;
    devices
        .release(uid)
        .await
        .map_err(|_| ReleaseError::Stopping)?;
    let failures: Vec<String> = claims?
        .into_iter()
        .filter_map(|c| {
            let error = c.error?;
            Some(format!(
                "ResourceClaim {}/{}: {error}",
                c.claim.namespace, c.claim.name
            ))
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ReleaseError::Unprepare(failures))
    }
}

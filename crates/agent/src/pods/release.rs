//! Giving back what a pod held, once it ended or went: its claims
//! unprepared (a claim with its last pod; the others only forget it), then
//! its devices released. Both are asked of their managers, which decide.
//! While a driver fails to unprepare a claim the pod keeps its devices too:
//! the kubelet keeps a pod whose claims are not unprepared among its active
//! pods, whose devices stay allocated.

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
    /// Giving back failed unexpectedly (a bug); tried again.
    #[error("giving back failed unexpectedly")]
    Panicked,
    /// A manager stopped: the agent is shutting down.
    #[error("the agent is stopping")]
    Stopping,
}

/// Gives back what pod `uid` holds: unprepares its claims, then, once
/// they all are, releases its devices.
pub(crate) async fn release(
    devices: &DeviceHandle,
    dra: &DraHandle,
    uid: &str,
) -> Result<(), ReleaseError> {
    let failures: Vec<String> = dra
        .unprepare_pod(uid)
        .await?
        .into_iter()
        .filter_map(|c| {
            let error = c.error?;
            Some(format!(
                "ResourceClaim {}/{}: {error}",
                c.claim.namespace, c.claim.name
            ))
        })
        .collect();
    if !failures.is_empty() {
        return Err(ReleaseError::Unprepare(failures));
    }
    devices
        .release(uid)
        .await
        .map(|_| ())
        .map_err(|_| ReleaseError::Stopping)
}

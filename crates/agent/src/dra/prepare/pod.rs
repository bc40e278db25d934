//! A pod's claims as the DRA manager prepares and unprepares them together
//! ([`DraHandle::prepare_pod`](crate::dra::DraHandle::prepare_pod),
//! [`DraHandle::unprepare_pod`](crate::dra::DraHandle::unprepare_pod)): each
//! claim with the drivers of its allocation and how the pod uses it, and
//! what came of each claim per driver. Reading a pod's claims from the API
//! and giving each container its CDI devices is the pods owner's part
//! (`crate::pods`).

use crate::dra::claim::{ClaimPod, ClaimRef, PreparedClaim};

/// One claim of a pod, read from the API and checked: allocated, reserved
/// for the pod, and (from a template) created for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaim {
    /// The claim.
    pub claim: ClaimRef,
    /// The drivers of its allocation results, sorted, each once.
    pub drivers: Vec<String>,
    /// The pod's containers that use it, and the requests they ask for.
    pub user: ClaimPod,
}

/// What one driver did with one claim of a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaimResult {
    /// The driver.
    pub driver: String,
    /// The claim, its devices from this driver, or why it failed.
    #[serde(flatten)]
    pub result: PreparedClaim,
}

/// What unpreparing a pod did with one of its claims.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaimUnprepared {
    /// The claim.
    pub claim: ClaimRef,
    /// The drivers that recorded it.
    pub drivers: Vec<String>,
    /// Whether the drivers were asked to unprepare it: not while other
    /// pods still use it.
    pub unprepared: bool,
    /// Why it failed, if it did: it stays recorded for the pod, so that
    /// unpreparing the pod again tries again.
    pub error: Option<String>,
}

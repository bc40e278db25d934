//! What a driver prepares and what it got.

use super::cdi::ContainerEdits;

/// A ResourceClaim, by reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID; results are keyed by it.
    pub uid: String,
}

/// A device the scheduler allocated to this driver for a claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocatedDevice {
    /// The claim's request it satisfies.
    pub request: String,
    /// The pool it is in.
    pub pool: String,
    /// The device.
    pub device: String,
}

/// A claim to prepare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Which claim.
    pub claim: ClaimRef,
    /// The devices allocated to this driver, when the server reads claims
    /// from the API server (`None` without an API client).
    pub allocation: Option<Vec<AllocatedDevice>>,
}

/// A device a claim got.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests it satisfies.
    pub requests: Vec<String>,
    /// The pool it is in.
    pub pool: String,
    /// The device.
    pub device: String,
    /// CDI ids of devices from the driver's own CDI specs.
    pub cdi_device_ids: Vec<String>,
    /// What the container needs, written by the server to a CDI spec file
    /// for the claim (with a CDI kind configured); its CDI id is added to
    /// `cdi_device_ids`.
    pub container_edits: Option<ContainerEdits>,
    /// For a shared device: this claim's share (v1 only).
    pub share_id: Option<String>,
}

/// A claim as prepared: what the driver said it got. Kept until the claim
/// is unprepared, across restarts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedClaim {
    /// Which claim.
    pub claim: ClaimRef,
    /// What it got (empty for a claim unprepared without a record).
    pub devices: Vec<PreparedDevice>,
}

//! What the DRA manager shows operators: a table of drivers and their
//! instances, the results of prepare and unprepare, and events.

use super::service::{DraService, HealthService};

/// One DRA driver.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraDriverStatus {
    /// The driver name.
    pub name: String,
    /// Its instances, oldest registration first.
    pub instances: Vec<DraInstanceStatus>,
    /// The cleanup waiting for an instance to connect, if any.
    pub pending_cleanup: Option<PendingCleanup>,
    /// When the driver's resources were last cleaned up (Unix milliseconds).
    pub cleaned_up_at_unix_ms: Option<u64>,
    /// Device health as the instance in use last reported it.
    pub devices: Vec<DeviceHealthStatus>,
}

/// One instance of a driver: one service endpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraInstanceStatus {
    /// The service socket.
    pub endpoint: String,
    /// The DRAPlugin version chosen.
    pub service: DraService,
    /// The health service followed, if the plugin lists one.
    pub health_service: Option<HealthService>,
    /// Whether its connection is up.
    pub connected: bool,
    /// Whether calls for the driver go to this instance.
    pub in_use: bool,
    /// When it was registered (Unix milliseconds).
    pub registered_at_unix_ms: u64,
    /// When the connection last came up or went down (Unix milliseconds).
    pub connection_changed_at_unix_ms: u64,
    /// Why the last connection attempt failed or the connection ended.
    pub last_error: Option<String>,
    /// Successful connections so far.
    pub connects: u64,
}

/// A scheduled cleanup.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingCleanup {
    /// When it runs unless an instance connects first (Unix milliseconds).
    pub deadline_unix_ms: u64,
    /// Time left.
    pub in_ms: u64,
    /// Failed attempts so far (the hook is retried with backoff).
    pub failures: u32,
    /// The last failure.
    pub last_error: Option<String>,
}

/// The health of one device, as a driver reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceHealthStatus {
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// `Healthy`, `Unhealthy` or `Unknown` (also when the report is older than its timeout).
    pub health: String,
    /// The driver's explanation (v1 only; at most 1024 characters).
    pub message: String,
    /// When the driver last checked (Unix seconds, as it said).
    pub last_updated_unix_s: i64,
    /// Whether the report is older than its timeout or came from an instance
    /// that is now disconnected, which makes it `Unknown`.
    pub stale: bool,
}

/// A claim to prepare or unprepare.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID; results are keyed by it.
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.name, self.uid)
    }
}

impl std::str::FromStr for ClaimRef {
    type Err = String;

    /// Parses `NAMESPACE/NAME/UID`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [namespace, name, uid]
                if !namespace.is_empty() && !name.is_empty() && !uid.is_empty() =>
            {
                Ok(Self {
                    namespace: (*namespace).into(),
                    name: (*name).into(),
                    uid: (*uid).into(),
                })
            }
            _ => Err(format!("{s:?} is not NAMESPACE/NAME/UID")),
        }
    }
}

/// One device a prepared claim got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests this device serves; empty means all.
    pub request_names: Vec<String>,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// CDI device ids for the container runtime.
    pub cdi_device_ids: Vec<String>,
    /// Share id (v1 only).
    pub share_id: Option<String>,
}

/// The outcome of preparing one claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedClaim {
    /// The claim.
    pub claim: ClaimRef,
    /// Its devices (empty on error).
    pub devices: Vec<PreparedDevice>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// The outcome of unpreparing one claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnpreparedClaim {
    /// The claim.
    pub claim: ClaimRef,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// What happened to a DRA driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DraEventKind {
    /// An instance was registered.
    InstanceAdded,
    /// An instance was deregistered.
    InstanceRemoved,
    /// An instance's connection came up.
    Connected,
    /// An instance's connection went down.
    Disconnected,
    /// No instance is connected: cleanup will run at the deadline.
    CleanupScheduled,
    /// An instance connected in time: the cleanup will not run.
    CleanupCancelled,
    /// The cleanup ran.
    CleanedUp,
    /// The cleanup failed and will be retried.
    CleanupFailed,
}

/// One DRA event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraEvent {
    /// What happened.
    pub kind: DraEventKind,
    /// The driver.
    pub driver: String,
    /// The instance's endpoint, for instance events.
    pub endpoint: Option<String>,
    /// Details: an error, or the cleanup deadline.
    pub detail: Option<String>,
    /// When (Unix milliseconds).
    pub at_unix_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_refs_parse_three_non_empty_parts() {
        let claim: ClaimRef = "ns/claim/uid-1".parse().unwrap();
        assert_eq!(claim.to_string(), "ns/claim/uid-1");
        for bad in ["ns/claim", "ns//uid", "a/b/c/d", ""] {
            assert!(bad.parse::<ClaimRef>().is_err(), "{bad}");
        }
    }
}

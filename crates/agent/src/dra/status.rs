//! What the DRA manager shows operators: a table of drivers, their
//! instances, pending cleanups and device health.

use crate::dra::drivers::health::DeviceHealthStatus;
use nodeplugins_api::dra_client::{DraService, HealthService};

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

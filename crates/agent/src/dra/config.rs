//! Settings of the DRA manager, with the kubelet's values as defaults.

use std::path::PathBuf;
use std::time::Duration;

use super::calls::CALL_TIMEOUT;
use super::cleanup::CLEANUP_GRACE;
use super::connection::{RECONNECT_INITIAL, RECONNECT_MAX};
use super::health::DEFAULT_HEALTH_TIMEOUT;

/// Dialing a DRA plugin's service socket, one attempt.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the DRA manager.
#[derive(Debug, Clone)]
pub struct DraManagerConfig {
    /// See [`CLEANUP_GRACE`].
    pub cleanup_grace: Duration,
    /// Deadline of prepare and unprepare calls; see [`CALL_TIMEOUT`].
    pub call_timeout: Duration,
    /// See [`DIAL_TIMEOUT`].
    pub dial_timeout: Duration,
    /// How long a device health report counts when the driver sets no
    /// timeout; see [`DEFAULT_HEALTH_TIMEOUT`].
    pub health_timeout: Duration,
    /// The first wait after a failed connection attempt; see [`RECONNECT_INITIAL`].
    pub reconnect_initial: Duration,
    /// The longest wait between connection attempts; see [`RECONNECT_MAX`].
    pub reconnect_max: Duration,
    /// Where prepared claims are checkpointed (the agent uses
    /// `<root>/nodeplugins`); `None` keeps them in memory only.
    pub state_dir: Option<PathBuf>,
}

impl Default for DraManagerConfig {
    fn default() -> Self {
        Self {
            cleanup_grace: CLEANUP_GRACE,
            call_timeout: CALL_TIMEOUT,
            dial_timeout: DIAL_TIMEOUT,
            health_timeout: DEFAULT_HEALTH_TIMEOUT,
            reconnect_initial: RECONNECT_INITIAL,
            reconnect_max: RECONNECT_MAX,
            state_dir: None,
        }
    }
}

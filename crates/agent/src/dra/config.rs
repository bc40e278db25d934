//! Settings of the DRA manager, with the kubelet's values as defaults.

use std::path::PathBuf;
use std::time::Duration;

use crate::dra::drivers::cleanup::CLEANUP_GRACE;
use crate::dra::drivers::connection::{RECONNECT_INITIAL, RECONNECT_MAX};
use crate::dra::drivers::health::DEFAULT_HEALTH_TIMEOUT;
use crate::dra::prepare::calls::CALL_TIMEOUT;
use crate::fs_watch::FsWatcher;

/// Dialing a DRA plugin's service socket, one attempt.
pub(super) const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the DRA manager.
#[derive(Debug, Clone)]
pub struct DraManagerConfig {
    /// The grace period between the last instance of a driver becoming
    /// unusable and its cleanup (upstream `defaultWipingDelay`, 30 s).
    pub cleanup_grace: Duration,
    /// The deadline of prepare and unprepare calls (upstream
    /// `defaultClientCallTimeout`, 45 s: half the kubelet's retry period).
    pub call_timeout: Duration,
    /// Dialing a DRA plugin's service socket, one attempt. Default: 10 s.
    pub dial_timeout: Duration,
    /// How long a device health report counts when the driver sets no
    /// timeout. Default: 30 s.
    pub health_timeout: Duration,
    /// The first wait after a failed connection attempt; it doubles per
    /// failure. A re-created socket is noticed at once regardless. Default:
    /// 1 ms.
    pub reconnect_initial: Duration,
    /// The longest wait between connection attempts. Default: 30 s.
    pub reconnect_max: Duration,
    /// Where prepared claims are checkpointed (the agent uses
    /// `<root>/nodeplugins`); `None` keeps them in memory only.
    pub state_dir: Option<PathBuf>,
    /// Waits for a disconnected instance's socket to come back (the agent
    /// shares one among all its parts).
    pub fs_watcher: FsWatcher,
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
            fs_watcher: FsWatcher::new(),
        }
    }
}

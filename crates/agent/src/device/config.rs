//! Settings of the device manager, with the kubelet's values as defaults.

use crate::fs_watch::FsWatcher;
use std::path::PathBuf;
use std::time::Duration;

/// How long a resource stays known after its last plugin disconnected
/// (upstream `endpointStopGracePeriod`, 5 min).
pub(super) const ENDPOINT_STOP_GRACE_PERIOD: Duration = Duration::from_secs(300);
/// Dialing a device plugin (upstream: 10 s).
pub(super) const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// GetDevicePluginOptions and GetPreferredAllocation. Upstream sets none, so
/// a hanging plugin blocks forever; here they are bounded.
pub(super) const OPTIONS_TIMEOUT: Duration = Duration::from_secs(10);
/// Allocate. Upstream sets none, so a plugin that never answers blocks the
/// container's start forever; here it is bounded.
pub(super) const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(120);
/// PreStartContainer (upstream `KubeletPreStartContainerRPCTimeoutInSecs`, 30 s).
pub(super) const PRE_START_TIMEOUT: Duration = Duration::from_secs(
    nodeplugins_api::constants::device_plugin::PRE_START_CONTAINER_TIMEOUT_SECS,
);

/// Settings of the device manager.
#[derive(Debug, Clone)]
pub struct DeviceManagerConfig {
    /// The device plugin directory, `<root>/device-plugins`: `kubelet.sock`,
    /// the plugins' sockets and the checkpoint.
    pub dir: PathBuf,
    /// How long a resource stays known after its last plugin disconnected (upstream
    /// `endpointStopGracePeriod`, 5 min).
    pub grace_period: Duration,
    /// Dialing a device plugin (upstream: 10 s).
    pub dial_timeout: Duration,
    /// GetDevicePluginOptions and GetPreferredAllocation. Upstream sets none, so a hanging
    /// plugin blocks forever; here they are bounded. Default: 10 s.
    pub options_timeout: Duration,
    /// Allocate. Upstream sets none, so a plugin that never answers blocks the container's
    /// start forever; here it is bounded. Default: 120 s.
    pub allocate_timeout: Duration,
    /// PreStartContainer (upstream `KubeletPreStartContainerRPCTimeoutInSecs`, 30 s).
    pub pre_start_timeout: Duration,
    /// Notices `kubelet.sock`'s removal (the agent shares one among all its
    /// parts).
    pub fs_watcher: FsWatcher,
}

impl DeviceManagerConfig {
    /// Upstream defaults for the directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            grace_period: ENDPOINT_STOP_GRACE_PERIOD,
            dial_timeout: DIAL_TIMEOUT,
            options_timeout: OPTIONS_TIMEOUT,
            allocate_timeout: ALLOCATE_TIMEOUT,
            pre_start_timeout: PRE_START_TIMEOUT,
            fs_watcher: FsWatcher::new(),
        }
    }
}

//! Plugin manager settings, with the kubelet's values as defaults.

use std::path::PathBuf;
use std::time::Duration;

/// Dialing a registration socket (upstream `dialTimeoutDuration`, 10 s).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// The GetInfo call (upstream: 1 s).
pub const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// NotifyRegistrationStatus (upstream `notifyTimeoutDuration`, 5 s).
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// First retry delay after a failure (upstream `initialDurationBeforeRetry`, 500 ms).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest retry delay (upstream `maxDurationBeforeRetry`, 2 min 2 s).
pub const MAX_BACKOFF: Duration = Duration::from_secs(122);
/// How long a refused connection is retried before it counts as a failure.
/// A plugin's socket file appears at `bind(2)`, an instant before
/// `listen(2)`; this covers that window without waiting out a whole backoff
/// step. The window is usually microseconds, but a Go plugin starting among
/// a thousand others was seen to take over 100 ms between the two calls.
/// (Upstream's blocking dial waits up to its full dial timeout.)
pub const CONNECTION_REFUSED_GRACE: Duration = Duration::from_secs(1);

/// A handler's validate, register or deregister call. A last resort:
/// handlers bound their own work (the CSI handler's NodeGetInfo: 2 min), but
/// a hung handler must not leave a socket path stuck for ever.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(150);

/// How many registrations talk to their plugins at once; the others wait
/// for a slot. A burst of new sockets would otherwise hold a connection (and
/// its buffers) per plugin at the same time, which the process keeps as
/// memory long after. Upstream starts them all at once.
pub const REGISTRATIONS_AT_ONCE: usize = 64;
/// A registration still running after this gives its slot to the next: a
/// plugin that is slow to answer holds no one up.
pub const SLOW_REGISTRATION: Duration = Duration::from_millis(20);

/// Settings of a [`super::PluginManager`].
#[derive(Debug, Clone)]
pub struct PluginManagerConfig {
    /// The watched directory, `<root>/plugins_registry`.
    pub dir: PathBuf,
    /// See [`DIAL_TIMEOUT`].
    pub dial_timeout: Duration,
    /// See [`GET_INFO_TIMEOUT`].
    pub get_info_timeout: Duration,
    /// See [`NOTIFY_TIMEOUT`].
    pub notify_timeout: Duration,
    /// See [`INITIAL_BACKOFF`].
    pub initial_backoff: Duration,
    /// See [`MAX_BACKOFF`].
    pub max_backoff: Duration,
    /// See [`CONNECTION_REFUSED_GRACE`].
    pub connection_refused_grace: Duration,
    /// See [`HANDLER_TIMEOUT`].
    pub handler_timeout: Duration,
    /// See [`REGISTRATIONS_AT_ONCE`].
    pub registrations_at_once: usize,
    /// See [`SLOW_REGISTRATION`].
    pub slow_registration: Duration,
}

impl PluginManagerConfig {
    /// Upstream defaults for the directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            dial_timeout: DIAL_TIMEOUT,
            get_info_timeout: GET_INFO_TIMEOUT,
            notify_timeout: NOTIFY_TIMEOUT,
            initial_backoff: INITIAL_BACKOFF,
            max_backoff: MAX_BACKOFF,
            connection_refused_grace: CONNECTION_REFUSED_GRACE,
            handler_timeout: HANDLER_TIMEOUT,
            registrations_at_once: REGISTRATIONS_AT_ONCE,
            slow_registration: SLOW_REGISTRATION,
        }
    }
}

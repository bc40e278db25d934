//! Plugin manager settings, with the kubelet's values as defaults.

use std::path::PathBuf;
use std::time::Duration;

/// Dialing a registration socket (upstream `dialTimeoutDuration`, 10 s).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// The GetInfo call (upstream: 1 s).
pub(super) const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// NotifyRegistrationStatus (upstream `notifyTimeoutDuration`, 5 s).
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// First retry delay after a failure (upstream `initialDurationBeforeRetry`, 500 ms).
pub(super) const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest retry delay (upstream `maxDurationBeforeRetry`, 2 min 2 s).
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(122);
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
pub(super) const HANDLER_TIMEOUT: Duration = Duration::from_secs(150);

/// How many registrations talk to their plugins at once; the others wait
/// for a slot. A burst of new sockets would otherwise hold a connection (and
/// its buffers) per plugin at the same time, which the process keeps as
/// memory long after. Upstream starts them all at once.
pub(super) const REGISTRATIONS_AT_ONCE: usize = 64;
/// A registration still running after this gives its slot to the next: a
/// plugin that is slow to answer holds no one up.
pub(super) const SLOW_REGISTRATION: Duration = Duration::from_millis(20);

/// Settings of a [`super::PluginManager`].
#[derive(Debug, Clone)]
pub struct PluginManagerConfig {
    /// The watched directory, `<root>/plugins_registry`.
    pub dir: PathBuf,
    /// Dialing a registration socket (upstream `dialTimeoutDuration`, 10 s).
    pub dial_timeout: Duration,
    /// The GetInfo call (upstream: 1 s).
    pub get_info_timeout: Duration,
    /// NotifyRegistrationStatus (upstream `notifyTimeoutDuration`, 5 s).
    pub notify_timeout: Duration,
    /// First retry delay after a failure (upstream `initialDurationBeforeRetry`, 500 ms).
    pub initial_backoff: Duration,
    /// Longest retry delay (upstream `maxDurationBeforeRetry`, 2 min 2 s).
    pub max_backoff: Duration,
    /// How long a refused connection is retried before it counts as a failure. A plugin's
    /// socket file appears at `bind(2)`, an instant before `listen(2)`; this covers that window
    /// without waiting out a whole backoff step. The window is usually microseconds, but a Go
    /// plugin starting among a thousand others was seen to take over 100 ms between the two
    /// calls. (Upstream's blocking dial waits up to its full dial timeout.) Default: 1 s.
    pub connection_refused_grace: Duration,
    /// A handler's validate, register or deregister call. A last resort: handlers bound their
    /// own work (the CSI handler's NodeGetInfo: 2 min), but a hung handler must not leave a
    /// socket path stuck for ever. Default: 150 s.
    pub handler_timeout: Duration,
    /// How many registrations talk to their plugins at once; the others wait for a slot. A
    /// burst of new sockets would otherwise hold a connection (and its buffers) per plugin at
    /// the same time, which the process keeps as memory long after. Upstream starts them all at
    /// once. Default: 64.
    pub registrations_at_once: usize,
    /// A registration still running after this gives its slot to the next: a plugin that is
    /// slow to answer holds no one up. Default: 20 ms.
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

//! How long the checks wait for a plugin.

use std::time::Duration;

/// GetInfo, as the kubelet bounds it.
pub(crate) const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// Dialing a socket and each service call.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

//! Wall-clock times as status and events show them.

use std::time::{SystemTime, UNIX_EPOCH};

/// `time` in milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

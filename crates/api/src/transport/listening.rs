//! Dialing a socket that may exist a moment before it listens.
//!
//! A server's socket file appears at `bind(2)`, an instant before its
//! `listen(2)`: a Go plugin's `net.Listen` makes both calls back to back,
//! but a watcher woken by the file's creation often runs between them, on
//! the plugin's CPU, and is refused. Such a dial is retried after a short
//! pause, doubling, for a grace period.

use std::io;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::{TransportError, UnaryConnection};
use crate::backoff::Backoff;

/// The first pause after a refused dial.
pub const FIRST_REFUSED_PAUSE: Duration = Duration::from_micros(50);
/// Pauses double up to this.
pub const MAX_REFUSED_PAUSE: Duration = Duration::from_millis(20);

/// [`UnaryConnection::connect`], retrying a refused dial for `grace`.
/// Returns the outcome and how many dials were refused.
pub async fn connect_when_listening(
    path: &Path,
    timeout: Duration,
    grace: Duration,
) -> (Result<UnaryConnection, TransportError>, u32) {
    let give_up = Instant::now() + grace;
    let schedule = Backoff::new(FIRST_REFUSED_PAUSE, MAX_REFUSED_PAUSE);
    let mut refused = 0;
    loop {
        let pause = schedule.delay(refused + 1);
        match UnaryConnection::connect(path, timeout).await {
            Err(e) if is_refused(&e) && Instant::now() + pause < give_up => {
                refused += 1;
                pause_for(pause).await;
            }
            other => return (other, refused),
        }
    }
}

/// Whether `error` is a refused connection.
pub fn is_refused(error: &TransportError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io.kind() == io::ErrorKind::ConnectionRefused;
        }
        source = e.source();
    }
    false
}

/// Sleeps for `pause`, also when it is shorter than the runtime timer's
/// millisecond: a short pause sleeps on a blocking thread, which gives the
/// CPU back to the server for just that long (the timer would round 50 µs
/// up to 1-2 ms).
async fn pause_for(pause: Duration) {
    if pause >= Duration::from_millis(1) {
        tokio::time::sleep(pause).await;
        return;
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a blocking thread sleeps, not a runtime thread"
    )]
    let sleep = move || std::thread::sleep(pause);
    if tokio::task::spawn_blocking(sleep).await.is_err() {
        // No blocking thread (the runtime is stopping): the timer will do.
        tokio::time::sleep(pause).await;
    }
}

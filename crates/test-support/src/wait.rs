//! Waiting for a condition with a deadline instead of sleeping.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// The default deadline for anything a test waits on.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// How often [`eventually`] checks again: it bounds latency only.
pub const POLL: Duration = Duration::from_millis(5);

/// Re-checks `check` until it returns `Some`, failing the test after `timeout`.
/// The re-check interval is short and only bounds latency; correctness never
/// depends on it.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the watched value satisfies `pred`, failing after `timeout`.
pub async fn watch_until<T: Clone>(
    what: &str,
    rx: &mut watch::Receiver<T>,
    timeout: Duration,
    mut pred: impl FnMut(&T) -> bool,
) -> T {
    match tokio::time::timeout(timeout, rx.wait_for(|v| pred(v))).await {
        Ok(Ok(value)) => value.clone(),
        Ok(Err(_)) => panic!("sender dropped while waiting for {what}"),
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}; last value unmatched"),
    }
}

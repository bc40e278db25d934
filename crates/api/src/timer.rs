//! The deadline a task sleeps until, when it has one.

use tokio::time::Instant;

/// Resolves at `deadline`; never, without one.
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

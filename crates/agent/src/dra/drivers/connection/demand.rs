//! What the rest of the agent asks of an instance's monitor.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Wakes an instance's monitor: to make its first connection (it starts
/// parked until the plugin was told it is registered), to try again at
/// once while disconnected, or to carry a call, which needs a full
/// connection rather than a light one.
#[derive(Debug, Default)]
pub(crate) struct Demand {
    wake: Notify,
    /// A call is waiting for a full connection.
    full: AtomicBool,
}

impl Demand {
    /// Connect now if not connected.
    pub(crate) fn connect(&self) {
        self.wake.notify_one();
    }

    /// A call needs a full connection: connect or upgrade now.
    pub(crate) fn call(&self) {
        self.full.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Resolves at the next demand (or at once for one made while nobody
    /// waited).
    pub(crate) async fn wake(&self) {
        self.wake.notified().await;
    }

    /// Whether a call asked for a full connection since the last look.
    pub(crate) fn take_full(&self) -> bool {
        self.full.swap(false, Ordering::AcqRel)
    }
}

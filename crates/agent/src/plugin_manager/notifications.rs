//! Handlers told that their plugins heard back ([`PluginHandler::notified`]),
//! once no registration is in progress.
//!
//! What a handler starts there (a DRA driver's monitored connection to its
//! service) is work the plugin does not wait for; during a burst of
//! registrations it would compete with the registrations themselves, which
//! plugins do wait for. So the reconciler keeps the notifications and hands
//! them out when its last running registration ends, or at the latest
//! [`NOTIFIED_DELAY_MAX`] after the oldest was kept, so that a steady stream
//! of registrations never holds them for long.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::plugin_manager::handler::PluginHandler;

/// The longest a handler waits to hear that its plugin was told.
pub(super) const NOTIFIED_DELAY_MAX: Duration = Duration::from_secs(1);

/// The handlers to tell, oldest first.
#[derive(Default)]
pub(super) struct Notifications {
    waiting: Vec<(Arc<dyn PluginHandler>, String, String)>,
    /// When the oldest was kept.
    since: Option<Instant>,
}

impl Notifications {
    /// Keeps `handler`'s notification for plugin `name` at `endpoint`.
    pub(super) fn push(&mut self, handler: Arc<dyn PluginHandler>, name: String, endpoint: String) {
        self.since.get_or_insert_with(Instant::now);
        self.waiting.push((handler, name, endpoint));
    }

    /// When they are due even with registrations running; `None` with
    /// nothing kept.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.since.map(|since| since + NOTIFIED_DELAY_MAX)
    }

    /// Whether to hand them out now: something is kept, and no
    /// registration runs or the deadline passed.
    pub(super) fn due(&self, registrations_running: bool) -> bool {
        match self.deadline() {
            None => false,
            Some(deadline) => !registrations_running || Instant::now() >= deadline,
        }
    }

    /// Tells every handler kept, oldest first.
    pub(super) async fn deliver(&mut self) {
        self.since = None;
        for (handler, name, endpoint) in std::mem::take(&mut self.waiting) {
            handler.notified(&name, &endpoint).await;
        }
    }
}

//! The plugin manager: discovers registration sockets under
//! `<root>/plugins_registry` and registers each plugin with the handler for
//! its type, following upstream's protocol and timeouts.
//!
//! - `watcher` (inotify) reports sockets appearing and disappearing;
//! - the `reconciler` task owns desired and actual state (keyed by socket
//!   path, with a generation per socket appearance) and runs at most one
//!   operation per path, with per-path exponential backoff on failure;
//! - `register` performs one registration: dial, GetInfo, validate,
//!   register, NotifyRegistrationStatus;
//! - `handler` is what a plugin type's handler implements (CSI, device
//!   plugins, DRA).
//!
//! # Differences from upstream
//!
//! - Event-driven: no once-a-second loop. A new socket is registered as soon
//!   as its creation event arrives, and nothing runs while idle.
//! - A failed handler `register` is retried with backoff. Upstream records the
//!   plugin in its actual state before calling the handler and leaves it
//!   there on failure, so it never retries until the socket is re-created.
//! - A failure is logged once per change of error; repeats go to debug level.
//! - A socket reported twice (initial walk and event) is one plugin: the
//!   desired state compares the file's inode before minting a new generation.

mod attempt_error;
mod bounded_handler;
mod config;
mod control;
pub(crate) mod handler;
mod handler_table;
mod metrics;
mod notifications;
mod reconciler;
mod register;
mod snapshot;
mod socket_retry;
mod state;
mod status;
mod watcher;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use crate::plugin_description::PluginDescription;
pub use config::{CONNECTION_REFUSED_GRACE, DIAL_TIMEOUT, NOTIFY_TIMEOUT, PluginManagerConfig};
pub use snapshot::PluginSnapshot;
pub use status::{PluginState, PluginStatus};
pub use watcher::WatchError;

use crate::event::AgentEvent;
use crate::plugin_manager::handler::PluginHandler;
use crate::published::{Publisher, Store};
use control::Control;
use handler_table::HandlerTable;
use reconciler::Reconciler;

/// How many events a slow event subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 4096;

/// The plugin manager's task. [`new`](Self::new) gives it with its
/// [`PluginManagerHandle`]; add handlers, then [`run`](Self::run) it.
pub struct PluginManager {
    config: Arc<PluginManagerConfig>,
    handlers: HandlerTable,
    control_tx: mpsc::Sender<Control>,
    control_rx: mpsc::Receiver<Control>,
    events: broadcast::Sender<AgentEvent>,
    published: Publisher<PluginSnapshot>,
    ready: watch::Sender<bool>,
}

/// The plugin manager has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the plugin manager is not running")]
pub struct PluginManagerStopped;

impl PluginManager {
    /// A manager watching `config.dir`, and the handle that reads it.
    pub fn new(config: PluginManagerConfig) -> (Self, PluginManagerHandle) {
        let (control_tx, control_rx) = mpsc::channel(1024);
        let (published, store) = Publisher::new(PluginSnapshot::default());
        let manager = Self {
            handlers: HandlerTable::new(config.handler_timeout),
            config: Arc::new(config),
            control_tx,
            control_rx,
            events: broadcast::channel(EVENT_BUFFER).0,
            published,
            ready: watch::channel(false).0,
        };
        let handle = PluginManagerHandle {
            events: manager.events.clone(),
            store,
            ready: manager.ready.subscribe(),
        };
        (manager, handle)
    }

    /// Routes plugins of `plugin_type` to `handler`, replacing any previous one.
    pub fn add_handler(&self, plugin_type: impl Into<String>, handler: Arc<dyn PluginHandler>) {
        self.handlers.insert(plugin_type.into(), handler);
    }

    /// Watches and registers until `shutdown`. Fails only if the directory
    /// cannot be created or watched.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WatchError> {
        let (watch_tx, watch_rx) = mpsc::channel(1024);
        let reconciler = Reconciler::new(
            self.config.clone(),
            self.handlers,
            self.control_tx,
            self.events,
            self.published,
            self.ready,
        );
        let watcher = watcher::watch(self.config.dir.clone(), watch_tx, shutdown.clone());
        let reconcile = reconciler.run(watch_rx, self.control_rx, shutdown.clone());
        let (watched, ()) = tokio::join!(
            async {
                let result = watcher.await;
                if result.is_err() {
                    shutdown.cancel();
                }
                result
            },
            reconcile
        );
        watched
    }
}

/// Reads the plugin manager's status and events.
#[derive(Clone)]
pub struct PluginManagerHandle {
    events: broadcast::Sender<AgentEvent>,
    store: Store<PluginSnapshot>,
    ready: watch::Receiver<bool>,
}

impl PluginManagerHandle {
    /// The plugin table after the latest change (empty, and not
    /// [`running`](PluginSnapshot::running), before the manager runs).
    pub fn snapshot(&self) -> PluginSnapshot {
        PluginSnapshot::clone(&self.store.get())
    }

    /// The plugin table after the latest change, once the manager runs.
    pub async fn running_snapshot(&self) -> Result<PluginSnapshot, PluginManagerStopped> {
        let running = self
            .store
            .wait_until_ready()
            .await
            .map_err(|_| PluginManagerStopped)?;
        Ok(PluginSnapshot::clone(&running))
    }

    /// The plugin table, sorted by socket path, once the manager runs.
    pub async fn status(&self) -> Result<Vec<PluginStatus>, PluginManagerStopped> {
        let snapshot = self.running_snapshot().await?;
        Ok(snapshot.status_at(tokio::time::Instant::now()))
    }

    /// Ticks after every change of the table.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.store.changes()
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.events.subscribe()
    }

    /// Whether the sockets present at start-up have been reported.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the sockets present at start-up have been reported.
    pub async fn ready(&self) -> Result<(), PluginManagerStopped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| PluginManagerStopped)
    }

    /// Waits until the plugin table satisfies `pred`, re-checking after every
    /// change, and returns it; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl FnMut(&[PluginStatus]) -> bool,
    ) -> Result<Option<Vec<PluginStatus>>, PluginManagerStopped> {
        let mut pred = pred;
        self.store
            .wait_for(
                timeout,
                |s| s.status_at(tokio::time::Instant::now()),
                |table| pred(table),
            )
            .await
            .map_err(|_| PluginManagerStopped)
    }
}

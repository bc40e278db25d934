//! The agent's recent events: plugin registration, device and DRA events merged into
//! one history (the newest [`EVENT_HISTORY`]) and one live stream, so a
//! client can read what happened and then follow without a gap or a repeat.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::parts::AdminParts;
use crate::event::AgentEvent;

/// How many past events the agent keeps.
pub(super) const EVENT_HISTORY: usize = 1000;
/// How far a client following the events may fall behind before it misses
/// some: a burst of a thousand plugins coming or going is several thousand
/// events at once.
const LIVE_BUFFER: usize = 4096;

/// The history and the live stream.
pub(super) struct EventLog {
    inner: Mutex<Inner>,
}

struct Inner {
    history: VecDeque<AgentEvent>,
    live: broadcast::Sender<AgentEvent>,
}

impl EventLog {
    /// Starts collecting the events of `parts` on `tasks` until `shutdown`.
    pub(super) fn start(
        parts: &AdminParts,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let log = Arc::new(Self {
            inner: Mutex::new(Inner {
                history: VecDeque::with_capacity(EVENT_HISTORY),
                live: broadcast::channel(LIVE_BUFFER).0,
            }),
        });
        let mut registry = parts.plugins.events();
        let mut dra = parts.dra.events();
        let mut devices = parts.devices.events();
        #[cfg(feature = "kube")]
        let mut kube = parts.kube.as_ref().map(|k| k.events());
        #[cfg(not(feature = "kube"))]
        let mut kube = ();
        let collector = log.clone();
        tasks.spawn(async move {
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    event = registry.recv() => event,
                    event = dra.recv() => event,
                    event = devices.recv() => event,
                    Some(event) = next_kube_event(&mut kube) => event,
                };
                match event {
                    Ok(event) => collector.push(event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "event history missed events");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        log
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, event: AgentEvent) {
        let mut inner = self.lock();
        if inner.history.len() == EVENT_HISTORY {
            inner.history.pop_front();
        }
        inner.history.push_back(event.clone());
        let _ = inner.live.send(event);
    }

    /// The past events, oldest first, and a stream of every later one.
    pub(super) fn subscribe(&self) -> (Vec<AgentEvent>, broadcast::Receiver<AgentEvent>) {
        let inner = self.lock();
        (
            inner.history.iter().cloned().collect(),
            inner.live.subscribe(),
        )
    }
}

/// The next API publishing event; never, without a publisher.
#[cfg(feature = "kube")]
async fn next_kube_event(
    events: &mut Option<broadcast::Receiver<AgentEvent>>,
) -> Option<Result<AgentEvent, broadcast::error::RecvError>> {
    match events {
        Some(events) => Some(events.recv().await),
        None => std::future::pending().await,
    }
}

/// Without the `kube` feature there is no publisher.
#[cfg(not(feature = "kube"))]
async fn next_kube_event(_: &mut ()) -> Option<Result<AgentEvent, broadcast::error::RecvError>> {
    std::future::pending().await
}

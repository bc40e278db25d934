//! What the write tasks tell operators: each kind's standing (pending,
//! failures in a row, the last error) gathered into the one status the
//! publisher shows, the writes counted, and a failure or a recovery said
//! once as an event. Every task holds a clone; a standing that did not
//! change publishes nothing.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use tokio::sync::{broadcast, watch};

use nodeplugins_api::retry::{Retry, Said};

use crate::common::unix_time::unix_ms;
use crate::event::{AgentEvent, EventKind, EventSubject};
use crate::kube_api::client::credentials::Connection;
use crate::kube_api::error::KubeApiError;
use crate::kube_api::metrics::KubeApiMetrics;
use crate::kube_api::status::{KubeApiStatus, WriteKind};
use crate::kube_api::writes::write_state::WriteState;
use crate::published::Publisher;

/// Where one kind of write stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Something is not yet written.
    pub(crate) pending: bool,
    /// Failed writes in a row.
    pub(crate) failures: u32,
    /// Why the last one failed, while it is failing.
    pub(crate) last_error: Option<String>,
}

impl Standing {
    /// A latest-state write's standing.
    pub(crate) fn of_write<T: PartialEq>(write: &WriteState<T>) -> Self {
        Self {
            pending: write.pending(),
            ..Self::of_retry(&write.failures)
        }
    }

    /// A standing that is pending only while it fails.
    pub(crate) fn of_retry(failures: &Retry<Arc<KubeApiError>>) -> Self {
        Self {
            pending: failures.failing(),
            failures: failures.failures(),
            last_error: failures.last_error().map(ToString::to_string),
        }
    }
}

/// The write tasks' common voice. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Reporter {
    inner: Arc<Inner>,
}

struct Inner {
    events: broadcast::Sender<AgentEvent>,
    metrics: KubeApiMetrics,
    connection: watch::Receiver<Connection>,
    node: String,
    status: Publisher<KubeApiStatus>,
    board: Mutex<Board>,
}

/// What the status is made of.
#[derive(Default)]
struct Board {
    /// In [`WriteKind`] order.
    kinds: [Standing; 3],
    user: Option<String>,
    last_success: Option<SystemTime>,
}

fn slot(kind: WriteKind) -> usize {
    match kind {
        WriteKind::NodeStatus => 0,
        WriteKind::CsiNode => 1,
        WriteKind::ResourceSlices => 2,
    }
}

const KINDS: [WriteKind; 3] = [
    WriteKind::NodeStatus,
    WriteKind::CsiNode,
    WriteKind::ResourceSlices,
];

impl Reporter {
    /// A reporter publishing into `status`, counting into `metrics` and
    /// telling `events`; the status names `connection`'s server and `node`.
    pub(crate) fn new(
        events: broadcast::Sender<AgentEvent>,
        metrics: KubeApiMetrics,
        connection: watch::Receiver<Connection>,
        node: String,
        status: Publisher<KubeApiStatus>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                events,
                metrics,
                connection,
                node,
                status,
                board: Mutex::new(Board::default()),
            }),
        }
    }

    /// `kind` stands as `standing` now. The writers say it after every
    /// wake-up; only a change publishes.
    pub(crate) fn stands(&self, kind: WriteKind, standing: Standing) {
        self.update(|board| {
            let slot = &mut board.kinds[slot(kind)];
            let changed = *slot != standing;
            *slot = standing;
            changed
        });
    }

    /// Who the API server takes the agent for.
    pub(crate) fn user(&self, user: Option<String>) {
        self.update(|board| {
            let changed = board.user != user;
            board.user = user;
            changed
        });
    }

    /// A write of `kind` ended, having said `said` of its failures; `error`:
    /// why it failed, if it did. Counts it, and tells about it when there is
    /// news.
    pub(crate) fn finished(&self, kind: WriteKind, said: Said, error: Option<Arc<KubeApiError>>) {
        let ok = error.is_none();
        self.inner.metrics.wrote(kind, ok);
        if ok {
            self.update(|board| {
                board.last_success = Some(SystemTime::now());
                true
            });
        }
        let (event, detail) = match (said, error) {
            (Said::NewError, Some(error)) => {
                tracing::warn!(write = %kind, %error, "Kubernetes API write failed; retrying");
                (EventKind::WriteFailed, Some(error.to_string()))
            }
            (Said::Quiet | Said::NewError, _) => return,
            (Said::Recovered, _) => {
                tracing::info!(write = %kind, "Kubernetes API has the latest state again");
                (EventKind::CaughtUp, None)
            }
        };
        let subject = EventSubject::Kube {
            write: kind.as_str().to_string(),
            detail,
        };
        let _ = self.inner.events.send(AgentEvent::now(event, subject));
    }

    /// A reporter for `node` whose connection's client points at a port
    /// nobody listens on, with a receiver of its events: for tests that
    /// feed a task's transitions without an API server.
    #[cfg(test)]
    pub(crate) fn detached(node: &str) -> (Self, broadcast::Receiver<AgentEvent>) {
        let server = "http://127.0.0.1:9";
        let config = kube::Config::new(server.parse().expect("a valid URL"));
        let client = kube::Client::try_from(config).expect("a client for a valid URL");
        let connection = watch::channel(Connection {
            client,
            server: server.into(),
        })
        .1;
        let status = KubeApiStatus {
            server: String::new(),
            node: node.into(),
            user: None,
            last_success_unix_ms: None,
            pending: Vec::new(),
            last_error: None,
            failures: 0,
        };
        let events = broadcast::channel(16).0;
        let receiver = events.subscribe();
        let reporter = Self::new(
            events,
            KubeApiMetrics::default(),
            connection,
            node.into(),
            Publisher::new(status).0,
        );
        (reporter, receiver)
    }

    /// The kinds of the events sent since `events` last looked.
    #[cfg(test)]
    pub(crate) fn kinds(events: &mut broadcast::Receiver<AgentEvent>) -> Vec<EventKind> {
        std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| e.kind)
            .collect()
    }

    /// The status as last published.
    #[cfg(test)]
    pub(crate) fn status(&self) -> Arc<KubeApiStatus> {
        self.inner.status.current()
    }

    /// How many times the status was published.
    #[cfg(test)]
    pub(crate) fn publications(&self) -> u64 {
        *self.inner.status.store().changes().borrow()
    }

    /// Applies `change` to the board and, when it says it changed
    /// something, publishes the status made from it.
    fn update(&self, change: impl FnOnce(&mut Board) -> bool) {
        let mut board = self
            .inner
            .board
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !change(&mut board) {
            return;
        }
        let pending: Vec<WriteKind> = KINDS
            .into_iter()
            .filter(|kind| board.kinds[slot(*kind)].pending)
            .collect();
        self.inner.metrics.set_pending(pending.len());
        let status = KubeApiStatus {
            server: self.inner.connection.borrow().server.clone(),
            node: self.inner.node.clone(),
            user: board.user.clone(),
            last_success_unix_ms: board.last_success.map(unix_ms),
            pending,
            last_error: board.kinds.iter().find_map(|k| k.last_error.clone()),
            failures: board.kinds.iter().map(|k| k.failures).max().unwrap_or(0),
        };
        // Published under the lock, so that two tasks' updates are
        // published in the order they were made.
        self.inner.status.publish_if_changed(status);
    }
}

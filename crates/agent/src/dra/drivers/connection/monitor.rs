//! The task that keeps one instance connected and reports every change.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::demand::Demand;
use super::error::{ConnectError, ConnectionEnd};
use super::handshake::{Driven, handshake};
use super::light::LightConnection;
use super::link::LinkEvent;
use crate::fs_watch::{FsWatch, FsWatcher};
use inotify::WatchMask;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};
use nodeplugins_api::timer::sleep_until;
use tokio::time::Instant;

/// The first retry after a failed connection attempt; it doubles per
/// failure. A re-created socket is noticed at once regardless.
pub(crate) const RECONNECT_INITIAL: Duration = Duration::from_millis(1);
/// The longest wait between connection attempts.
pub(crate) const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// What the monitor needs besides the endpoint.
#[derive(Debug, Clone)]
pub(crate) struct MonitorConfig {
    /// Bound on one connection attempt.
    pub(crate) dial_timeout: Duration,
    /// How long a closed connection may drain calls still running on it.
    pub(crate) drain_timeout: Duration,
    /// See [`RECONNECT_INITIAL`].
    pub(crate) reconnect_initial: Duration,
    /// See [`RECONNECT_MAX`].
    pub(crate) reconnect_max: Duration,
}

/// Keeps one instance connected. Ends when `close` fires (the instance was
/// deregistered: calls still running may finish within the drain timeout)
/// or `shutdown` does (the agent stops: everything ends at once).
///
/// The connection starts light ([`LightConnection`]): enough to see the
/// plugin go away, and cheap enough for a thousand idle drivers. The first
/// call upgrades it to a full HTTP/2 client connection, which then carries
/// every call and is the one monitored; after a loss, an instance that was
/// upgraded reconnects with a full connection straight away.
pub(crate) struct Monitor {
    /// The instance, named in reports.
    pub(crate) id: u64,
    pub(crate) endpoint: Arc<Path>,
    pub(crate) config: MonitorConfig,
    /// Where reports go.
    pub(crate) reports: mpsc::UnboundedSender<(u64, LinkEvent)>,
    /// Calls and the registration waking the monitor.
    pub(crate) demand: Arc<Demand>,
    /// Wait for a demand before the first connection: the registration
    /// asks once the plugin was told it is registered, so that the plugin's
    /// answer to its notification is not held up by this connection.
    pub(crate) parked: bool,
    /// Where a disconnected instance watches for its socket.
    pub(crate) sockets: FsWatcher,
    pub(crate) close: CancellationToken,
    pub(crate) shutdown: CancellationToken,
}

/// An established connection.
enum Connection {
    Light(LightConnection),
    Full(Driven),
}

impl Monitor {
    fn report(&self, event: LinkEvent) {
        let _ = self.reports.send((self.id, event));
    }

    fn stopping(&self) -> impl Future<Output = ()> + '_ {
        let (close, shutdown) = (self.close.clone(), self.shutdown.clone());
        async move {
            tokio::select! {
                () = close.cancelled() => {}
                () = shutdown.cancelled() => {}
            }
        }
    }

    /// Connects, holds the connection, and reconnects, until closed.
    pub(crate) async fn run(self) {
        if self.parked {
            tokio::select! {
                biased;
                () = self.stopping() => return,
                () = self.demand.wake() => {}
            }
        }
        let socket = self.endpoint.display().to_string();
        let mut retry: Retry<Arc<ConnectError>> = Retry::default();
        let backoff = Backoff::new(self.config.reconnect_initial, self.config.reconnect_max);
        let mut socket_watch: Option<FsWatch> = None;
        // Once a call needed a full connection, every later one is full.
        let mut full = false;
        loop {
            full |= self.demand.take_full();
            let attempt = tokio::select! {
                biased;
                () = self.stopping() => break,
                attempt = tokio::time::timeout(self.config.dial_timeout, self.open(full)) => attempt,
            };
            let attempt =
                attempt.unwrap_or_else(|_| Err(ConnectError::Timeout(self.config.dial_timeout)));
            match attempt {
                Ok(connection) => {
                    retry.succeeded();
                    tracing::info!(%socket, full = matches!(connection, Connection::Full(_)), "DRA plugin connected");
                    // Not before the connection is announced.
                    socket_watch = None;
                    let Some(why) = self.hold(connection, &mut full).await else {
                        break;
                    };
                    tracing::warn!(%socket, reason = %why, "DRA plugin connection lost; reconnecting");
                    self.report(LinkEvent::Lost(Arc::new(why)));
                }
                Err(error) => {
                    let error = Arc::new(error);
                    if retry.failed(error.clone(), &backoff, Instant::now()) == Said::NewError {
                        tracing::warn!(%socket, %error, "cannot connect to DRA plugin; retrying with backoff");
                    } else {
                        tracing::debug!(%socket, %error, "DRA plugin still unreachable");
                    }
                    self.report(LinkEvent::AttemptFailed { error, full });
                    if socket_watch.is_none() {
                        socket_watch = self.watch_socket();
                        if socket_watch.is_some() {
                            // The socket may have appeared before the watch
                            // existed: look once more before waiting.
                            continue;
                        }
                    }
                    tokio::select! {
                        biased;
                        () = self.stopping() => break,
                        () = sleep_until(retry.due_at()) => {}
                        () = self.demand.wake() => {}
                        () = FsWatch::fired(&mut socket_watch) => {
                            // The socket appeared again: start the schedule afresh.
                            retry.restart();
                        }
                    }
                }
            }
        }
    }

    /// One connection attempt, light or full; reports the connection.
    /// A wait for the instance's socket to be created again, if one can be
    /// set up.
    fn watch_socket(&self) -> Option<FsWatch> {
        let dir = self.endpoint.parent()?;
        let mask = WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ATTRIB;
        self.sockets
            .watch(dir, self.endpoint.file_name(), mask)
            .ok()
    }

    async fn open(&self, full: bool) -> Result<Connection, ConnectError> {
        if full {
            let (sender, driven) = handshake(&self.endpoint).await?;
            self.report(LinkEvent::Connected(Some(sender)));
            Ok(Connection::Full(driven))
        } else {
            let light = LightConnection::handshake(&self.endpoint).await?;
            self.report(LinkEvent::Connected(None));
            Ok(Connection::Light(light))
        }
    }

    /// Holds `connection` until it ends (`Some(why)`) or the monitor is
    /// stopped (`None`), upgrading a light one when a call asks.
    async fn hold(&self, mut connection: Connection, full: &mut bool) -> Option<ConnectionEnd> {
        loop {
            match &mut connection {
                Connection::Light(light) => {
                    tokio::select! {
                        biased;
                        () = self.stopping() => return None,
                        why = light.closed() => return Some(why),
                        () = self.demand.wake() => {}
                    }
                    if !self.demand.take_full() {
                        // Asked to connect: it is.
                        continue;
                    }
                    let upgrade = tokio::select! {
                        biased;
                        () = self.stopping() => return None,
                        why = light.closed() => return Some(why),
                        upgrade = tokio::time::timeout(self.config.dial_timeout, handshake(&self.endpoint)) => upgrade,
                    };
                    match upgrade {
                        Ok(Ok((sender, driven))) => {
                            *full = true;
                            self.report(LinkEvent::Upgraded(sender));
                            // The light connection closes as it is dropped.
                            connection = Connection::Full(driven);
                        }
                        Ok(Err(error)) => self.report(LinkEvent::AttemptFailed {
                            error: Arc::new(error),
                            full: true,
                        }),
                        Err(_) => self.report(LinkEvent::AttemptFailed {
                            error: Arc::new(ConnectError::Timeout(self.config.dial_timeout)),
                            full: true,
                        }),
                    }
                }
                Connection::Full(driven) => {
                    let ended = tokio::select! {
                        biased;
                        () = self.close.cancelled() => {
                            self.drain(driven.as_mut()).await;
                            return None;
                        }
                        () = self.shutdown.cancelled() => return None,
                        ended = driven.as_mut() => ended,
                        () = self.demand.wake() => {
                            // Connected already.
                            self.demand.take_full();
                            continue;
                        }
                    };
                    return Some(match ended {
                        Ok(()) => ConnectionEnd::Closed,
                        Err(e) => ConnectionEnd::Http2(e),
                    });
                }
            }
        }
    }

    /// Lets calls still running on a closed instance finish: the connection
    /// ends by itself once no sender is left and no stream is open.
    async fn drain<F>(&self, connection: Pin<&mut F>)
    where
        F: Future<Output = hyper::Result<()>>,
    {
        tokio::select! {
            () = self.shutdown.cancelled() => {}
            _ = tokio::time::timeout(self.config.drain_timeout, connection) => {}
        }
    }
}

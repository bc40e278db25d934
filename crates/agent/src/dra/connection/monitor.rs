//! The task that keeps one instance connected and reports every change.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::transport::root_cause;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::handshake::handshake;
use super::link::LinkEvent;
use super::socket_watch::SocketWatch;
use crate::retry::delay_after;

/// The first retry after a failed connection attempt; it doubles per
/// failure. A re-created socket is noticed at once regardless.
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(1);
/// The longest wait between connection attempts.
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);

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
pub(crate) struct Monitor {
    /// The instance, named in reports.
    pub(crate) id: u64,
    pub(crate) endpoint: Arc<Path>,
    pub(crate) config: MonitorConfig,
    /// Where reports go.
    pub(crate) reports: mpsc::UnboundedSender<(u64, LinkEvent)>,
    /// A call found no connection: try at once.
    pub(crate) kick: Arc<Notify>,
    pub(crate) close: CancellationToken,
    pub(crate) shutdown: CancellationToken,
}

impl Monitor {
    fn report(&self, event: LinkEvent) {
        let _ = self.reports.send((self.id, event));
    }

    /// Connects, drives the connection, and reconnects, until closed.
    pub(crate) async fn run(self) {
        let socket = self.endpoint.display().to_string();
        let mut failures: u32 = 0;
        let mut last_error: Option<String> = None;
        let mut socket_watch: Option<SocketWatch> = None;
        loop {
            let attempt = tokio::select! {
                biased;
                () = self.close.cancelled() => break,
                () = self.shutdown.cancelled() => break,
                attempt = tokio::time::timeout(self.config.dial_timeout, handshake(&self.endpoint)) => attempt,
            };
            let attempt = attempt.unwrap_or_else(|_| {
                Err(format!(
                    "no connection within {:?}",
                    self.config.dial_timeout
                ))
            });
            match attempt {
                Ok((sender, mut connection)) => {
                    failures = 0;
                    last_error = None;
                    tracing::info!(%socket, "DRA plugin connected");
                    self.report(LinkEvent::Connected(sender));
                    // Not before the connection is announced.
                    SocketWatch::close(socket_watch.take());
                    let ended = tokio::select! {
                        biased;
                        () = self.close.cancelled() => {
                            self.drain(connection.as_mut()).await;
                            break;
                        }
                        () = self.shutdown.cancelled() => break,
                        ended = &mut connection => ended,
                    };
                    let why = match ended {
                        Ok(()) => "the plugin closed the connection".to_string(),
                        Err(e) => root_cause(&e),
                    };
                    tracing::warn!(%socket, reason = %why, "DRA plugin connection lost; reconnecting");
                    self.report(LinkEvent::Lost(why));
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    if last_error.as_deref() == Some(&error) {
                        tracing::debug!(%socket, %error, "DRA plugin still unreachable");
                    } else {
                        tracing::warn!(%socket, %error, "cannot connect to DRA plugin; retrying with backoff");
                    }
                    last_error = Some(error.clone());
                    self.report(LinkEvent::AttemptFailed(error));
                    if socket_watch.is_none() {
                        socket_watch = SocketWatch::new(&self.endpoint);
                        if socket_watch.is_some() {
                            // The socket may have appeared before the watch
                            // existed: look once more before waiting.
                            continue;
                        }
                    }
                    let delay = delay_after(
                        failures,
                        self.config.reconnect_initial,
                        self.config.reconnect_max,
                    );
                    tokio::select! {
                        biased;
                        () = self.close.cancelled() => break,
                        () = self.shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                        () = self.kick.notified() => {}
                        () = SocketWatch::next(&mut socket_watch) => {
                            // The socket appeared again: start the schedule afresh.
                            failures = 0;
                        }
                    }
                }
            }
        }
        SocketWatch::close(socket_watch.take());
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

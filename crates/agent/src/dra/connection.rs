//! A monitored connection to one DRA plugin instance's service socket.
//!
//! The connection is ours rather than a lazily reconnecting channel's: a task
//! dials the socket, performs the HTTP/2 handshake and then drives the
//! connection, so the moment the plugin goes away (the process exits, the
//! server shuts down) the task sees it and reports it, not at the next call.
//! It then reconnects at once and, while that fails, with backoff; a watch on
//! the socket's directory cuts the wait short when the socket is created
//! again, so a restarted plugin is reconnected within milliseconds.
//!
//! Every call and the health stream share the one connection through
//! [`Channel`], a gRPC service tonic clients run on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use inotify::{Inotify, WatchMask};
use nodeplugins_api::transport::root_cause;
use tokio::net::UnixStream;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

use crate::registry::backoff::delay_after;

/// The first retry after a failed connection attempt; it doubles per
/// failure. A re-created socket is noticed at once regardless.
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(1);
/// The longest wait between connection attempts.
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);

type Body = tonic::body::Body;

/// Where a connection stands.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionState {
    /// Present while connected.
    pub(crate) sender: Option<SendRequest<Body>>,
    /// Why the last attempt failed or the last connection ended.
    pub(crate) last_error: Option<String>,
    /// Finished connection attempts, successful or not.
    pub(crate) attempts: u64,
    /// Successful connections.
    pub(crate) connects: u64,
    /// When `connected` last changed.
    pub(crate) since: SystemTime,
}

impl ConnectionState {
    pub(crate) fn connected(&self) -> bool {
        self.sender.is_some()
    }
}

/// The monitored connection of one instance. Dropping it does not stop the
/// monitor; [`Connection::close`] does.
pub(crate) struct Connection {
    state: watch::Receiver<ConnectionState>,
    kick: Arc<Notify>,
    cancel: CancellationToken,
    endpoint: Arc<Path>,
}

/// What the monitor needs besides the endpoint.
pub(crate) struct MonitorConfig {
    /// Bound on one connection attempt.
    pub(crate) dial_timeout: Duration,
    /// How long a closed connection may drain calls still running on it.
    pub(crate) drain_timeout: Duration,
    /// See [`RECONNECT_INITIAL`].
    pub(crate) reconnect_initial: Duration,
    /// See [`RECONNECT_MAX`].
    pub(crate) reconnect_max: Duration,
    /// Called after every change of connectedness.
    pub(crate) on_change: Arc<dyn Fn(bool) + Send + Sync>,
    /// Stops everything at once (agent shutdown).
    pub(crate) shutdown: CancellationToken,
}

impl Connection {
    /// Starts monitoring `endpoint` on `tasks`.
    pub(crate) fn start(endpoint: PathBuf, config: MonitorConfig, tasks: &TaskTracker) -> Self {
        let (state_tx, state) = watch::channel(ConnectionState {
            sender: None,
            last_error: None,
            attempts: 0,
            connects: 0,
            since: SystemTime::now(),
        });
        let kick = Arc::new(Notify::new());
        let cancel = CancellationToken::new();
        let endpoint: Arc<Path> = Arc::from(endpoint);
        let monitor = Monitor {
            endpoint: endpoint.clone(),
            state: state_tx,
            kick: kick.clone(),
            cancel: cancel.clone(),
            config,
        };
        tasks.spawn(monitor.run());
        Self {
            state,
            kick,
            cancel,
            endpoint,
        }
    }

    /// The current state.
    pub(crate) fn state(&self) -> ConnectionState {
        self.state.borrow().clone()
    }

    /// Follows the state.
    pub(crate) fn watch(&self) -> watch::Receiver<ConnectionState> {
        self.state.clone()
    }

    /// A gRPC channel over this connection.
    pub(crate) fn channel(&self) -> Channel {
        Channel {
            state: self.state.clone(),
            kick: self.kick.clone(),
            endpoint: self.endpoint.clone(),
        }
    }

    /// Stops reconnecting; calls still running may finish (within the drain
    /// timeout), new ones fail.
    pub(crate) fn close(&self) {
        self.cancel.cancel();
    }
}

struct Monitor {
    endpoint: Arc<Path>,
    state: watch::Sender<ConnectionState>,
    kick: Arc<Notify>,
    cancel: CancellationToken,
    config: MonitorConfig,
}

impl Monitor {
    async fn run(self) {
        let socket = self.endpoint.display().to_string();
        let mut failures: u32 = 0;
        let mut socket_watch: Option<SocketWatch> = None;
        loop {
            let attempt = tokio::select! {
                biased;
                () = self.cancel.cancelled() => break,
                () = self.config.shutdown.cancelled() => break,
                attempt = tokio::time::timeout(self.config.dial_timeout, handshake(&self.endpoint)) => attempt,
            };
            let attempt = attempt.unwrap_or_else(|_| {
                Err(format!(
                    "no connection within {:?}",
                    self.config.dial_timeout
                ))
            });
            match attempt {
                Ok((sender, connection)) => {
                    failures = 0;
                    self.state.send_modify(|s| {
                        s.sender = Some(sender);
                        s.last_error = None;
                        s.attempts += 1;
                        s.connects += 1;
                        s.since = SystemTime::now();
                    });
                    tracing::info!(%socket, "DRA plugin connected");
                    (self.config.on_change)(true);
                    if let Some(watch) = socket_watch.take() {
                        // Closing an inotify descriptor waits for the kernel
                        // (milliseconds): not on this task, and not before
                        // the connection is announced.
                        tokio::task::spawn_blocking(move || drop(watch));
                    }
                    let mut connection = connection;
                    let ended = tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => {
                            self.drain(connection.as_mut()).await;
                            break;
                        }
                        () = self.config.shutdown.cancelled() => break,
                        ended = &mut connection => ended,
                    };
                    let why = match ended {
                        Ok(()) => "the plugin closed the connection".to_string(),
                        Err(e) => root_cause(&e),
                    };
                    self.state.send_modify(|s| {
                        s.sender = None;
                        s.last_error = Some(why.clone());
                        s.since = SystemTime::now();
                    });
                    tracing::warn!(%socket, reason = %why, "DRA plugin connection lost; reconnecting");
                    (self.config.on_change)(false);
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    let repeated = self.state.borrow().last_error.as_deref() == Some(&error);
                    self.state.send_modify(|s| {
                        s.attempts += 1;
                        s.last_error = Some(error.clone());
                    });
                    if repeated {
                        tracing::debug!(%socket, %error, "DRA plugin still unreachable");
                    } else {
                        tracing::warn!(%socket, %error, "cannot connect to DRA plugin; retrying with backoff");
                    }
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
                        () = self.cancel.cancelled() => break,
                        () = self.config.shutdown.cancelled() => break,
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
        self.state.send_modify(|s| {
            if s.sender.take().is_some() {
                s.since = SystemTime::now();
            }
        });
        if let Some(watch) = socket_watch.take() {
            tokio::task::spawn_blocking(move || drop(watch));
        }
    }

    /// Lets calls still running on a closed instance finish: the connection
    /// ends by itself once no sender is left and no stream is open.
    async fn drain<F>(&self, connection: Pin<&mut F>)
    where
        F: Future<Output = hyper::Result<()>>,
    {
        self.state.send_modify(|s| {
            s.sender = None;
            s.since = SystemTime::now();
        });
        tokio::select! {
            () = self.config.shutdown.cancelled() => {}
            _ = tokio::time::timeout(self.config.drain_timeout, connection) => {}
        }
    }
}

type Driven = Pin<Box<http2::Connection<TokioIo<FirstRead>, Body, TokioExecutor>>>;

/// Dials, performs the handshake, and waits for the plugin's first bytes
/// (its SETTINGS frame). A socket in the listen backlog of a process that is
/// exiting accepts the dial and the client preface; only an answer shows a
/// server is there.
async fn handshake(endpoint: &Path) -> Result<(SendRequest<Body>, Driven), String> {
    let stream = UnixStream::connect(endpoint)
        .await
        .map_err(|e| format!("dial {}: {e}", endpoint.display()))?;
    let (answered, first_read) = tokio::sync::oneshot::channel();
    let io = FirstRead {
        inner: stream,
        first_read: Some(answered),
    };
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| {
            format!(
                "HTTP/2 handshake with {}: {}",
                endpoint.display(),
                root_cause(&e)
            )
        })?;
    let mut connection = Box::pin(connection);
    tokio::select! {
        _ = first_read => Ok((sender, connection)),
        ended = &mut connection => Err(match ended {
            Ok(()) => format!("{} closed the connection before answering", endpoint.display()),
            Err(e) => format!("{}: {}", endpoint.display(), root_cause(&e)),
        }),
    }
}

/// A socket that reports the first bytes it reads.
struct FirstRead {
    inner: UnixStream,
    first_read: Option<tokio::sync::oneshot::Sender<()>>,
}

impl tokio::io::AsyncRead for FirstRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got_bytes = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if let Some(tx) = self.first_read.take_if(|_| got_bytes) {
            let _ = tx.send(());
        }
        polled
    }
}

impl tokio::io::AsyncWrite for FirstRead {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Notices the service socket being created again. Only exists while the
/// instance is disconnected, so a connected instance costs no watch.
struct SocketWatch {
    events: inotify::EventStream<[u8; 1024]>,
    name: std::ffi::OsString,
}

impl SocketWatch {
    fn new(endpoint: &Path) -> Option<Self> {
        let dir = endpoint.parent()?;
        let name = endpoint.file_name()?.to_owned();
        let inotify = Inotify::init().ok()?;
        inotify
            .watches()
            .add(
                dir,
                WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ATTRIB,
            )
            .ok()?;
        let events = inotify.into_event_stream([0u8; 1024]).ok()?;
        Some(Self { events, name })
    }

    /// Resolves when the socket's name is created; never, without a watch.
    async fn next(watch: &mut Option<Self>) {
        let Some(w) = watch else {
            return std::future::pending().await;
        };
        loop {
            match w.events.next().await {
                Some(Ok(event)) if event.name.as_deref() == Some(w.name.as_os_str()) => return,
                Some(Ok(_)) => {}
                // The watch broke: fall back to the backoff schedule alone.
                Some(Err(_)) | None => {
                    *watch = None;
                    return std::future::pending().await;
                }
            }
        }
    }
}

/// A gRPC channel over a monitored connection, for tonic clients. A call
/// while disconnected asks for an immediate attempt and waits for its outcome.
#[derive(Clone)]
pub(crate) struct Channel {
    state: watch::Receiver<ConnectionState>,
    kick: Arc<Notify>,
    endpoint: Arc<Path>,
}

impl Channel {
    async fn sender(mut self) -> Result<SendRequest<Body>, Status> {
        let current = self.state.borrow_and_update().clone();
        if let Some(sender) = current.sender.filter(|s| !s.is_closed()) {
            return Ok(sender);
        }
        self.kick.notify_one();
        let seen = current.attempts;
        let state = self
            .state
            .wait_for(|s| s.sender.is_some() || s.attempts > seen)
            .await
            .map(|s| s.clone());
        match state {
            Ok(ConnectionState {
                sender: Some(sender),
                ..
            }) => Ok(sender),
            Ok(ConnectionState { last_error, .. }) => Err(Status::unavailable(format!(
                "DRA plugin at {} is not connected: {}",
                self.endpoint.display(),
                last_error.unwrap_or_else(|| "no connection yet".into())
            ))),
            Err(_) => Err(Status::unavailable(format!(
                "DRA plugin at {} was removed",
                self.endpoint.display()
            ))),
        }
    }
}

impl tower_service::Service<http::Request<Body>> for Channel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = Status;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let channel = self.clone();
        Box::pin(async move {
            let endpoint = channel.endpoint.clone();
            let unavailable = |e: hyper::Error| {
                Status::unavailable(format!(
                    "DRA plugin at {}: {}",
                    endpoint.display(),
                    root_cause(&e)
                ))
            };
            let mut sender = channel.sender().await?;
            sender.ready().await.map_err(unavailable)?;
            sender.send_request(request).await.map_err(unavailable)
        })
    }
}

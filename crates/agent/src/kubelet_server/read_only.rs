//! The kubelet's read-only port (`readOnlyPort`, `10255` when set): plain
//! HTTP, no authentication and no authorization, and only what the
//! kubelet serves there (its `ListenAndServeKubeletReadOnlyServer`): the
//! health checks, `/pods`, `/stats`, the metrics; the debugging handlers
//! are never installed on it, their paths answering `405 Debug endpoints
//! are disabled.` to anyone.
//!
//! Which paths it has is decided as its mux decides it: a path nothing is
//! registered for is Go's `404 page not found`; the root of a subtree
//! without its `/` is redirected to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::reply::{self, Reply};
use super::routes::{HEALTH_AND_METRICS, Mux, not_found, redirect, route};
use super::state::State;
use crate::common::tcp_accept::accept;

/// How long a client has to send a request's head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest request head taken (Go's `MaxHeaderBytes`, 1 MiB).
const MAX_HEADER_BYTES: usize = 1 << 20;

/// The subtrees registered with their `/`: the stats, and the roots of
/// the debugging handlers, each of those answering that they are
/// disabled.
const SUBTREES: &[&str] = &[
    STATS,
    "/run",
    "/exec",
    "/attach",
    "/portForward",
    "/containerLogs",
    "/runningpods",
    "/debug/pprof",
    "/logs",
];

/// The one subtree served.
const STATS: &str = "/stats";

fn below(path: &str, root: &str) -> bool {
    path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

/// What the read-only port's mux does with `path`.
fn mux(path: &str) -> Mux {
    // No `/configz`, `/flagz`, `/statusz` or `/debug/flags/v`: those
    // are installed with the debugging handlers.
    if HEALTH_AND_METRICS.contains(&path)
        || path == "/pods"
        || below(path, "/pods")
        || SUBTREES.iter().any(|root| below(path, root))
    {
        Mux::Handled
    } else if SUBTREES.contains(&path) {
        Mux::Redirect
    } else {
        Mux::Unknown
    }
}

/// The answer to `request` on the read-only port.
async fn handle(state: &State, request: Request<Incoming>) -> Reply {
    let path = request.uri().path().to_string();
    match mux(&path) {
        Mux::Handled => {}
        Mux::Redirect => return redirect(request.method(), &path, request.uri().query()),
        Mux::Unknown => return not_found(),
    }
    let disabled = SUBTREES
        .iter()
        .any(|root| *root != STATS && below(&path, root));
    let answer = if disabled {
        reply::http_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "Debug endpoints are disabled.",
        )
    } else {
        route(state, request).await
    };
    tracing::debug!(%path, status = answer.status().as_u16(), "kubelet read-only port request");
    answer
}

/// The read-only port, bound.
pub(crate) struct ReadOnlyPort {
    listener: TcpListener,
}

impl ReadOnlyPort {
    /// Binds `addr`.
    pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
        })
    }

    /// The address it listens on.
    pub(crate) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `state` until `shutdown`; then stops taking connections and
    /// ends the open ones.
    pub(crate) async fn serve(self, state: Arc<State>, shutdown: CancellationToken) {
        let connections = TaskTracker::new();
        while let Some((stream, peer)) =
            accept(&self.listener, "kubelet read-only port", &shutdown).await
        {
            let state = state.clone();
            let shutdown = shutdown.clone();
            connections.spawn(async move {
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(&state, request).await) }
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .max_buf_size(MAX_HEADER_BYTES);
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                tokio::pin!(connection);
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(%peer, error = %e, "kubelet read-only port: connection");
                        }
                    }
                    () = shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
                }
            });
        }
        connections.close();
        connections.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_only_mux_has_the_kubelets_paths_and_no_debugging_ones() {
        for handled in [
            "/healthz",
            "/healthz/syncloop",
            "/pods",
            "/pods/",
            "/stats/summary",
            "/metrics/resource",
            "/exec/ns/pod/c",
            "/containerLogs/ns/pod/c",
            "/logs/",
            "/debug/pprof/",
        ] {
            assert_eq!(mux(handled), Mux::Handled, "{handled}");
        }
        for redirected in [
            "/stats",
            "/exec",
            "/run",
            "/logs",
            "/debug/pprof",
            "/runningpods",
        ] {
            assert_eq!(mux(redirected), Mux::Redirect, "{redirected}");
        }
        for unknown in [
            "/",
            "/configz",
            "/flagz",
            "/statusz",
            "/debug/flags/v",
            "/checkpoint/a/b/c",
            "/podsx",
        ] {
            assert_eq!(mux(unknown), Mux::Unknown, "{unknown}");
        }
    }
}

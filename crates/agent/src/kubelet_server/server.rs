//! The listener of the kubelet's API: TLS on each accepted connection
//! (its handshake bounded, so that a client that never finishes it holds
//! nothing), HTTP/1.1 with upgrades on it, and on every request the
//! kubelet's filter chain: authenticate (401 `Unauthorized`), authorize
//! (403 with the attributes refused; 500 when no review could be had),
//! then the endpoint. Each request is logged at debug with its user and
//! status.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::authn::Authenticator;
use super::authz::{Authorizer, Decision, describe, request_attributes};
use super::config::KubeletServerConfig;
use super::read_only::ReadOnlyPort;
use super::reply::{self, Reply};
use super::routes::{Mux, mux, not_found, redirect, route};
use super::serving_cert::{self, CertError};
use super::state::State;
use super::tls::{self, TlsError};
use crate::fs_watch::FsWatcher;
use crate::kube_api::Connection;
use crate::pods::PodsHandle;
use crate::runtime::ContainerRuntime;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest request head taken (Go's `MaxHeaderBytes`, 1 MiB).
const MAX_HEADER_BYTES: usize = 1 << 20;

/// What the server reads: the node's pods, its runtime, the API.
#[derive(Clone)]
pub struct ServerParts {
    /// The node's name (the `nodes/<name>` of every review).
    pub node_name: String,
    /// The pods bound to the node.
    pub pods: PodsHandle,
    /// The runtime they run on.
    pub runtime: Arc<dyn ContainerRuntime>,
    /// The API, for TokenReviews and SubjectAccessReviews.
    pub connection: watch::Receiver<Connection>,
    /// The agent's inotify instance (followed logs wait on it).
    pub fs_watcher: FsWatcher,
    /// What `/metrics` serves (the agent's metrics endpoint's sources).
    pub metrics: Vec<Arc<dyn crate::metrics::MetricsSource>>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeletServerError {
    /// The serving certificate could not be read or made.
    #[error("kubelet server certificate: {0}")]
    Certificate(String),
    /// The TLS configuration could not be made.
    #[error("kubelet server: {0}")]
    Tls(String),
    /// The address could not be bound.
    #[error("kubelet server {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl From<CertError> for KubeletServerError {
    fn from(e: CertError) -> Self {
        Self::Certificate(e.to_string())
    }
}

impl From<TlsError> for KubeletServerError {
    fn from(e: TlsError) -> Self {
        Self::Tls(e.to_string())
    }
}

/// The kubelet's API, bound and ready to serve.
pub struct KubeletServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    /// The read-only port, when one is asked for.
    read_only: Option<ReadOnlyPort>,
}

impl KubeletServer {
    /// Reads (or makes) the serving certificate and binds `config`'s
    /// address.
    pub async fn bind(
        config: KubeletServerConfig,
        parts: ServerParts,
    ) -> Result<Self, KubeletServerError> {
        let source = config.certificate.clone();
        let serving = tokio::task::spawn_blocking(move || serving_cert::load(&source))
            .await
            .map_err(|e| KubeletServerError::Certificate(e.to_string()))??;
        let (tls_config, chain_check) =
            tls::server_config(serving, config.client_ca_file.as_deref())?;
        let listener =
            TcpListener::bind(config.addr)
                .await
                .map_err(|source| KubeletServerError::Bind {
                    addr: config.addr,
                    source,
                })?;
        let read_only = match config.read_only_addr {
            None => None,
            Some(addr) => Some(
                ReadOnlyPort::bind(addr)
                    .await
                    .map_err(|source| KubeletServerError::Bind { addr, source })?,
            ),
        };
        let state = State {
            authenticator: Authenticator::new(
                chain_check,
                config.token_webhook.then(|| parts.connection.clone()),
                config.token_cache_ttl,
                config.anonymous,
            ),
            authorizer: Authorizer::new(
                config.authorization,
                parts.connection,
                config.authorized_ttl,
                config.unauthorized_ttl,
            ),
            node_name: parts.node_name,
            pods: parts.pods,
            runtime: parts.runtime,
            fs_watcher: parts.fs_watcher,
            debugging_handlers: config.debugging_handlers,
            metrics: Arc::new(parts.metrics),
        };
        Ok(Self {
            listener,
            acceptor: TlsAcceptor::from(tls_config),
            state: Arc::new(state),
            read_only,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The address the read-only port listens on, when there is one.
    pub fn read_only_addr(&self) -> Option<std::io::Result<SocketAddr>> {
        self.read_only.as_ref().map(ReadOnlyPort::local_addr)
    }

    /// Serves (and the read-only port beside) until `shutdown`; then
    /// stops taking connections and ends the open ones.
    pub async fn serve(mut self, shutdown: CancellationToken) {
        let connections = TaskTracker::new();
        if let Some(read_only) = self.read_only.take() {
            connections.spawn(read_only.serve(self.state.clone(), shutdown.clone()));
        }
        while let Some((stream, peer)) =
            crate::common::tcp_accept::accept(&self.listener, "kubelet server", &shutdown).await
        {
            let acceptor = self.acceptor.clone();
            let state = self.state.clone();
            let shutdown = shutdown.clone();
            connections.spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                    .await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "kubelet server: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "kubelet server: TLS handshake timed out");
                        return;
                    }
                };
                let certificates: Arc<Vec<CertificateDer<'static>>> = Arc::new(
                    tls.get_ref()
                        .1
                        .peer_certificates()
                        .map(|certs| certs.iter().map(|c| c.clone().into_owned()).collect())
                        .unwrap_or_default(),
                );
                let service = service_fn(move |request| {
                    let state = state.clone();
                    let certificates = certificates.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            handle(&state, &certificates, request).await,
                        )
                    }
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .max_buf_size(MAX_HEADER_BYTES);
                let connection = builder
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades();
                tokio::pin!(connection);
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(%peer, error = %e, "kubelet server: connection");
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

/// The filter chain and the endpoint for one request.
async fn handle(
    state: &State,
    certificates: &[CertificateDer<'static>],
    request: Request<Incoming>,
) -> Reply {
    match mux(request.uri().path()) {
        Mux::Handled => {}
        Mux::Redirect => {
            return redirect(
                request.method(),
                request.uri().path(),
                request.uri().query(),
            );
        }
        Mux::Unknown => return not_found(),
    }
    let user = match state
        .authenticator
        .authenticate(certificates, request.headers())
        .await
    {
        Ok(Some(user)) => user,
        Ok(None) => return reply::text(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Err(e) => {
            tracing::info!(error = %e, path = request.uri().path(), "kubelet server: unable to authenticate the request");
            return reply::text(StatusCode::UNAUTHORIZED, "Unauthorized");
        }
    };
    let attributes = request_attributes(&state.node_name, request.method(), request.uri().path());
    match state.authorizer.authorize(&user, &attributes).await {
        Decision::Allow => {}
        Decision::Deny => {
            // The kubelet's refusal ends with a newline; its other
            // answers here do not.
            return reply::text(
                StatusCode::FORBIDDEN,
                format!("{}\n", describe("Forbidden", &user, &attributes)),
            );
        }
        Decision::Error(e) => {
            tracing::warn!(error = %e, user = %user.name, "kubelet server: authorization error");
            return reply::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                describe("Authorization error", &user, &attributes),
            );
        }
    }
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let answer = route(state, request).await;
    tracing::debug!(user = %user.name, %method, path, status = answer.status().as_u16(), "kubelet server request");
    answer
}

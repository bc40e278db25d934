//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the
//! agent runs) and `/readyz` (every [`ReadinessCheck`] passes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::source::{MetricsSource, ReadinessCheck};

/// What the endpoint reports.
#[derive(Clone, Default)]
pub struct MetricsEndpoint {
    /// Rendered in order on each scrape.
    pub sources: Vec<Arc<dyn MetricsSource>>,
    /// All must pass for `/readyz` to answer 200.
    pub readiness: Vec<Arc<dyn ReadinessCheck>>,
}

impl MetricsEndpoint {
    async fn render(&self) -> String {
        let mut out = String::new();
        for source in &self.sources {
            source.render(&mut out).await;
        }
        out
    }

    fn not_ready(&self) -> Vec<String> {
        self.readiness
            .iter()
            .filter_map(|check| check.not_ready())
            .collect()
    }

    async fn respond(&self, path: &str) -> hyper::Response<Full<Bytes>> {
        let (status, content_type, body) = match path {
            "/metrics" => (200, "text/plain; version=0.0.4", self.render().await),
            "/healthz" => (200, "text/plain", "ok\n".to_string()),
            "/readyz" => match self.not_ready().as_slice() {
                [] => (200, "text/plain", "ok\n".to_string()),
                reasons => (
                    503,
                    "text/plain",
                    format!("not ready: {}\n", reasons.join("; ")),
                ),
            },
            _ => (404, "text/plain", "not found\n".to_string()),
        };
        let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        if let Ok(value) = http::HeaderValue::from_str(content_type) {
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, value);
        }
        response
    }
}

/// Binds `addr` and answers until `shutdown`; returns the bound address and
/// the serving future, which ends once every connection has.
pub async fn serve_metrics(
    addr: SocketAddr,
    endpoint: MetricsEndpoint,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let serving = async move {
        let connections = TaskTracker::new();
        loop {
            let stream = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept failed");
                        // Out of file descriptors and the like: pause instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let endpoint = endpoint.clone();
            let stop = shutdown.clone();
            connections.spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let endpoint = endpoint.clone();
                    async move { Ok::<_, Infallible>(endpoint.respond(request.uri().path()).await) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = connection => {}
                }
            });
        }
        connections.close();
        connections.wait().await;
    };
    Ok((local, serving))
}

//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the
//! agent runs) and `/readyz` (every [`ReadinessCheck`] passes).

use std::net::SocketAddr;
use std::sync::Arc;

use nodeplugins_api::text_server::{TextAnswer, serve_text};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

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

    async fn respond(&self, path: &str) -> TextAnswer {
        match path {
            "/metrics" => TextAnswer {
                status: 200,
                content_type: "text/plain; version=0.0.4",
                body: self.render().await,
            },
            "/healthz" => TextAnswer::plain(200, "ok\n"),
            "/readyz" => match self.not_ready().as_slice() {
                [] => TextAnswer::plain(200, "ok\n"),
                reasons => TextAnswer::plain(503, format!("not ready: {}\n", reasons.join("; "))),
            },
            _ => TextAnswer::not_found(),
        }
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
    let answer = move |path: String| {
        let endpoint = endpoint.clone();
        async move { endpoint.respond(&path).await }
    };
    Ok((local, serve_text(listener, "metrics", answer, shutdown)))
}

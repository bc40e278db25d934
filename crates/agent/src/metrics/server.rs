//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the
//! agent runs) and `/readyz` (every [`ReadinessCheck`] passes).

use std::net::SocketAddr;
use std::sync::Arc;

use nodeplugins_api::text_server::{TextAnswer, serve_text};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::source::{MetricsSource, ReadinessCheck};

/// What the endpoint reports.
#[derive(Clone, Default)]
pub struct MetricsEndpoint {
    /// Registered in order in the endpoint's registry.
    pub sources: Vec<Arc<dyn MetricsSource>>,
    /// All must pass for `/readyz` to answer 200.
    pub readiness: Vec<Arc<dyn ReadinessCheck>>,
}

impl MetricsEndpoint {
    /// Registers every source's families in `registry`: the agent's
    /// metrics in an application's own registry, served with its own.
    pub fn register(&self, registry: &mut Registry) {
        for source in &self.sources {
            source.register(registry);
        }
    }

    fn not_ready(&self) -> Vec<String> {
        self.readiness
            .iter()
            .filter_map(|check| check.not_ready())
            .collect()
    }

    fn respond(&self, registry: &Registry, path: &str) -> TextAnswer {
        match path {
            "/metrics" => {
                let mut body = String::new();
                match prometheus_text::encode(&mut body, registry) {
                    Ok(()) => TextAnswer {
                        status: 200,
                        content_type: "text/plain; version=0.0.4",
                        body,
                    },
                    // Writing to a String fails only if a family's own
                    // encoding does.
                    Err(std::fmt::Error) => TextAnswer::plain(500, "cannot encode the metrics\n"),
                }
            }
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
/// the serving future, which ends once every connection has. Each scrape
/// encodes the families the endpoint's sources registered, in the
/// Prometheus text format (0.0.4).
pub async fn serve_metrics(
    addr: SocketAddr,
    endpoint: MetricsEndpoint,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let mut registry = Registry::default();
    endpoint.register(&mut registry);
    let registry = Arc::new(registry);
    let answer = move |path: String| {
        let endpoint = endpoint.clone();
        let registry = registry.clone();
        async move { endpoint.respond(&registry, &path) }
    };
    Ok((local, serve_text(listener, "metrics", answer, shutdown)))
}

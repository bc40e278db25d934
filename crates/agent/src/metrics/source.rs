//! What each part of the agent gives the metrics endpoint: its metric
//! families, and whether it holds back `/readyz`.

use prometheus_client::registry::Registry;

/// A part of the agent with metrics: it registers its families (or a
/// collector that reads its state on each scrape) in a registry, the
/// agent's own or an embedder's.
pub trait MetricsSource: Send + Sync + 'static {
    /// Registers its metric families in `registry`.
    fn register(&self, registry: &mut Registry);
}

/// A part of the agent that can hold back `/readyz`.
pub trait ReadinessCheck: Send + Sync + 'static {
    /// Why the agent is not ready yet, or `None` when this part is.
    fn not_ready(&self) -> Option<String>;
}

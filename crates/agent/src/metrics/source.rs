//! What each part of the agent gives the metrics endpoint: its metric
//! families on each scrape, and whether it holds back `/readyz`.

/// A part of the agent with metrics to show on each scrape.
#[async_trait::async_trait]
pub trait MetricsSource: Send + Sync + 'static {
    /// Appends its metric families to `out`, in the text exposition format.
    async fn render(&self, out: &mut String);
}

/// A part of the agent that can hold back `/readyz`.
pub trait ReadinessCheck: Send + Sync + 'static {
    /// Why the agent is not ready yet, or `None` when this part is.
    fn not_ready(&self) -> Option<String>;
}

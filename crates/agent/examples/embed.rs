//! Embedding the agent: the built-in handlers, a DRA cleanup hook of your
//! own (here it only prints; in a cluster it would delete the node's
//! ResourceSlices of the driver), and a handler for a plugin type of your own.
//!
//! Run: `cargo run -p nodeplugins --example embed -- /tmp/embed-root`
//! (drop a plugin socket of type `ExamplePlugin` into its plugins_registry).

use std::sync::Arc;

use nodeplugins::agent::{Agent, AgentConfig};
use nodeplugins::dra::{CleanupError, DriverCleanup};
use nodeplugins::{HandlerError, PluginHandler};
use tokio_util::sync::CancellationToken;

/// Withdraws what a DRA driver advertised once it stays unusable.
struct PrintCleanup;

#[async_trait::async_trait]
impl DriverCleanup for PrintCleanup {
    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        tracing::info!(%driver, "would delete this node's ResourceSlices of the driver");
        Ok(())
    }
}

/// Accepts plugins of type `ExamplePlugin` that list version `v1`.
struct ExampleHandler;

#[async_trait::async_trait]
impl PluginHandler for ExampleHandler {
    async fn validate(&self, _: &str, _: &str, versions: &[String]) -> Result<(), HandlerError> {
        if versions.iter().any(|v| v == "v1") {
            Ok(())
        } else {
            Err(HandlerError::new(format!(
                "supported versions {versions:?} do not include v1"
            )))
        }
    }

    async fn register(&self, name: &str, endpoint: &str, _: &[String]) -> Result<(), HandlerError> {
        tracing::info!(%name, %endpoint, "example plugin in use");
        Ok(())
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        tracing::info!(%name, %endpoint, "example plugin gone");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().init();
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/tmp/embed-root".into());
    let mut config = AgentConfig::new(&root);
    config.dra.cleanup_grace = std::time::Duration::from_secs(10);
    let agent = Agent::with_dra_cleanup(config, Arc::new(PrintCleanup));
    agent.add_handler("ExamplePlugin", Arc::new(ExampleHandler));

    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    agent.run(shutdown).await?;
    Ok(())
}

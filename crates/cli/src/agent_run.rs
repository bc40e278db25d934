//! Running the agent until SIGTERM or SIGINT: what `nodeplugins run` and
//! `nodeplugins kubelet` both end in, once their settings are resolved.

use anyhow::Context;
use nodeplugins::agent::{Agent, AgentConfig};
use nodeplugins::kube_api::KubeApiConfig;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Runs the agent of `config` (publishing to the API as `kube` says)
/// until a signal stops it.
pub(crate) async fn run(config: AgentConfig, kube: Option<KubeApiConfig>) -> anyhow::Result<()> {
    let root_dir = config.root_dir.clone();
    let shutdown = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let stop = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received, stopping"),
            _ = interrupt.recv() => tracing::info!("SIGINT received, stopping"),
        }
        stop.cancel();
    });
    let agent = match kube {
        Some(kube) => Agent::with_kube_api(config, kube).await?,
        None => Agent::new(config),
    };
    tracing::info!(root_dir = %root_dir.display(), "nodeplugins agent starting");
    // The agent's errors name the root, the socket or the directory at fault.
    agent.run(shutdown).await?;
    tracing::info!("nodeplugins agent stopped");
    Ok(())
}

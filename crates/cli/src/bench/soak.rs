//! `nodeplugins bench soak`: many register/deregister cycles against a
//! running agent, with its open file descriptors and RSS before and after,
//! to show nothing leaks.
//!
//! Each worker owns one socket path and, per cycle, starts a plugin there,
//! waits for NotifyRegistrationStatus(true) and stops it (removing the
//! socket). The next cycle's registration on the same path is only notified
//! after the agent handled the removal, so every cycle is a full
//! register/deregister. At the end the agent must show no plugins.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

use super::fleet_plugin::FleetPlugin;
use super::proc_stats;

/// Options of `bench soak`.
#[derive(Debug, clap::Args)]
pub(crate) struct SoakArgs {
    /// The watched registration directory (`<root>/plugins_registry`).
    #[arg(long)]
    dir: PathBuf,
    /// The agent's root directory (its admin socket says when all plugins are gone).
    #[arg(long)]
    root_dir: PathBuf,
    /// The agent's pid, for open file descriptors and RSS.
    #[arg(long)]
    agent_pid: u32,
    /// Register/deregister cycles in all.
    #[arg(long, default_value_t = 100_000)]
    cycles: usize,
    /// Sockets cycling at once.
    #[arg(long, default_value_t = 8)]
    parallel: usize,
    /// Cycles before the "before" sample, so start-up allocations do not count.
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Plugin type: CSIPlugin, DevicePlugin or DRAPlugin.
    #[arg(long = "type", default_value = "CSIPlugin")]
    plugin_type: String,
}

fn open_fds(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

async fn cycles(args: &SoakArgs, count: usize) -> anyhow::Result<Vec<Duration>> {
    let per_worker = count.div_ceil(args.parallel);
    let workers = (0..args.parallel).map(|w| {
        let socket = args.dir.join(format!("soak-{w}.sock"));
        let kind = args.plugin_type.clone();
        async move {
            let mut latencies = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let mut plugin = FleetPlugin::start(socket.clone(), &kind, w).await?;
                let at = tokio::time::timeout(Duration::from_secs(30), &mut plugin.registered)
                    .await
                    .with_context(|| format!("{} not registered in 30 s", socket.display()))?
                    .context("plugin server stopped")?;
                latencies.push(at - plugin.listening_at);
                plugin.stop().await;
            }
            anyhow::Ok(latencies)
        }
    });
    let all = futures::future::try_join_all(workers).await?;
    Ok(all.into_iter().flatten().collect())
}

async fn wait_no_plugins(args: &SoakArgs) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = nodeplugins::admin::status(&args.root_dir).await?;
        if status.plugins.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} plugins still listed 30 s after the last cycle",
                status.plugins.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs the soak and prints its report.
pub(crate) async fn run_soak(args: SoakArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    println!(
        "soak: {} register/deregister cycles of type {} on {} sockets",
        args.cycles, args.plugin_type, args.parallel
    );
    cycles(&args, args.warmup).await?;
    wait_no_plugins(&args).await?;
    let before = proc_stats::sample(args.agent_pid)?;
    let fds_before = open_fds(args.agent_pid)?;
    println!(
        "after {} warm-up cycles: agent open fds {fds_before}, RSS {:.1} MiB",
        args.warmup,
        before.rss_kib as f64 / 1024.0
    );
    let started = Instant::now();
    let mut latencies = cycles(&args, args.cycles).await?;
    let elapsed = started.elapsed();
    wait_no_plugins(&args).await?;
    let after = proc_stats::sample(args.agent_pid)?;
    let fds_after = open_fds(args.agent_pid)?;
    latencies.sort();
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "{} cycles in {:.1} s ({:.0} cycles/s); listening -> notified p50 {:.3} ms, p99 {:.3} ms",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
    );
    println!(
        "after the cycles, all plugins gone: agent open fds {fds_after} (before {fds_before}), RSS {:.1} MiB (before {:.1} MiB), CPU {:.1} s",
        after.rss_kib as f64 / 1024.0,
        before.rss_kib as f64 / 1024.0,
        after.cpu_ticks.saturating_sub(before.cpu_ticks) as f64
            / proc_stats::TICKS_PER_SECOND as f64
    );
    if fds_after > fds_before {
        bail!(
            "the agent holds {} more file descriptors than before",
            fds_after - fds_before
        );
    }
    Ok(())
}

//! `nodeplugins bench fleet`: registration latency as a plugin sees it.
//!
//! Every figure is measured from the plugin side (socket listening →
//! NotifyRegistrationStatus(true)), so the benchmark works against any plugin
//! manager watching `--dir`, including a real kubelet. Deregistration latency
//! needs the agent's event stream (`--root-dir`), and CPU, wake-ups and RSS
//! need its pid (`--agent-pid`); both are optional.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

use super::fleet_plugin::FleetPlugin;
use super::proc_stats::{self, TICKS_PER_SECOND};
use crate::output::human;

/// Options of `bench fleet`.
#[derive(Debug, clap::Args)]
pub(crate) struct FleetArgs {
    /// The watched registration directory (`<root>/plugins_registry`).
    #[arg(long)]
    dir: PathBuf,
    /// Plugins in the burst.
    #[arg(long, default_value_t = 1000)]
    plugins: usize,
    /// Plugin type: CSIPlugin, DevicePlugin or DRAPlugin.
    #[arg(long = "type", default_value = "CSIPlugin")]
    plugin_type: String,
    /// How often to register a single plugin.
    #[arg(long, default_value_t = 50)]
    repeat: usize,
    /// Plugins kept registered during the idle measurement.
    #[arg(long, default_value_t = 100)]
    idle_plugins: usize,
    /// Length of the idle measurement (needs --agent-pid).
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// The agent's pid, for CPU time, wake-ups and RSS.
    #[arg(long)]
    agent_pid: Option<u32>,
    /// The agent's root directory, for deregistration latency through its event stream.
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// Give up on a registration after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
}

struct Stats(Vec<Duration>);

impl Stats {
    fn line(&mut self) -> String {
        self.0.sort();
        let at = |p: f64| self.0[((self.0.len() - 1) as f64 * p).round() as usize];
        if self.0.is_empty() {
            return "no samples".into();
        }
        format!(
            "p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms  (n={})",
            ms(at(0.5)),
            ms(at(0.99)),
            ms(*self.0.last().unwrap_or(&Duration::ZERO)),
            self.0.len()
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn registered(
    plugin: FleetPlugin,
    timeout: Duration,
) -> anyhow::Result<(FleetPlugin, Duration)> {
    let mut plugin = plugin;
    let at = tokio::time::timeout(timeout, &mut plugin.registered)
        .await
        .with_context(|| {
            format!(
                "{} not registered within {timeout:?}",
                plugin.socket.display()
            )
        })?
        .context("plugin server stopped")?;
    let latency = at - plugin.listening_at;
    Ok((plugin, latency))
}

/// Waits for `count` deregistration events for sockets under `dir`.
async fn deregistrations(
    events: &mut Option<nodeplugins::admin::EventStream>,
    mut count: usize,
    timeout: Duration,
) -> anyhow::Result<Option<Instant>> {
    let Some(events) = events else {
        return Ok(None);
    };
    let deadline = Instant::now() + timeout;
    while count > 0 {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Ok(Some(event)))
                if event.kind == nodeplugins::event::EventKind::Deregistered
                    && event.source() == "registry" =>
            {
                count -= 1
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => bail!("the agent closed its event stream"),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => bail!("{count} deregistrations missing after {timeout:?}"),
        }
    }
    Ok(Some(Instant::now()))
}

async fn start_many(
    dir: &Path,
    prefix: &str,
    n: usize,
    kind: &str,
) -> anyhow::Result<Vec<FleetPlugin>> {
    let starts =
        (0..n).map(|i| FleetPlugin::start(dir.join(format!("{prefix}-{i}.sock")), kind, i));
    futures::future::try_join_all(starts).await
}

/// Runs the benchmark and prints its report.
pub(crate) async fn run_fleet(args: FleetArgs) -> anyhow::Result<()> {
    let began = Instant::now();
    let timeout = Duration::from_secs(args.timeout_secs);
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let mut events = match &args.root_dir {
        Some(root) => Some(nodeplugins::admin::events(root).await?),
        None => None,
    };
    println!(
        "fleet benchmark: type {} in {}",
        args.plugin_type,
        args.dir.display()
    );

    // One plugin at a time.
    let mut single = Stats(Vec::new());
    let mut dereg = Stats(Vec::new());
    for i in 0..args.repeat {
        let plugin =
            FleetPlugin::start(args.dir.join("bench-single.sock"), &args.plugin_type, i).await?;
        let (plugin, latency) = registered(plugin, timeout).await?;
        single.0.push(latency);
        let stopped = Instant::now();
        plugin.stop().await;
        if let Some(done) = deregistrations(&mut events, 1, timeout).await? {
            dereg.0.push(done - stopped);
        }
    }
    println!(
        "single plugin x{}: listening -> notified          {}",
        args.repeat,
        single.line()
    );
    if !dereg.0.is_empty() {
        println!(
            "single plugin x{}: socket removed -> deregistered {}",
            args.repeat,
            dereg.line()
        );
    }

    // Idle with a fleet registered.
    if args.idle_plugins > 0 {
        let plugins = start_many(&args.dir, "idle", args.idle_plugins, &args.plugin_type).await?;
        let plugins =
            futures::future::try_join_all(plugins.into_iter().map(|p| registered(p, timeout)))
                .await?;
        if let Some(pid) = args.agent_pid {
            // Let any lingering work (connection teardown) finish first.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let before = proc_stats::sample(pid)?;
            tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
            let after = proc_stats::sample(pid)?;
            println!(
                "idle {}s with {} plugins registered: agent CPU {} ms, context switches {}",
                args.idle_secs,
                args.idle_plugins,
                (after.cpu_ticks - before.cpu_ticks) * 1000 / TICKS_PER_SECOND,
                after.context_switches_since(&before),
            );
        }
        let n = plugins.len();
        futures::future::join_all(plugins.into_iter().map(|(p, _)| p.stop())).await;
        deregistrations(&mut events, n, timeout).await?;
    }

    // A burst.
    let started = Instant::now();
    let plugins = start_many(&args.dir, "burst", args.plugins, &args.plugin_type).await?;
    let first_listening = plugins
        .iter()
        .map(|p| p.listening_at)
        .min()
        .unwrap_or(started);
    let done =
        futures::future::try_join_all(plugins.into_iter().map(|p| registered(p, timeout))).await?;
    let last = done
        .iter()
        .map(|(p, l)| p.listening_at + *l)
        .max()
        .unwrap_or(started);
    let mut burst = Stats(done.iter().map(|(_, l)| *l).collect());
    println!(
        "burst of {}: listening -> notified               {}",
        args.plugins,
        burst.line()
    );
    println!(
        "burst of {}: first listening -> last notified     {:.1} ms",
        args.plugins,
        ms(last - first_listening)
    );
    if let Some(pid) = args.agent_pid {
        let sample = proc_stats::sample(pid)?;
        println!(
            "agent RSS with {} plugins registered: {:.1} MiB",
            args.plugins,
            sample.rss_kib as f64 / 1024.0
        );
    }
    let n = done.len();
    let stopped = Instant::now();
    futures::future::join_all(done.into_iter().map(|(p, _)| p.stop())).await;
    if let Some(end) = deregistrations(&mut events, n, timeout).await? {
        println!(
            "burst of {}: all sockets removed -> deregistered  {:.1} ms",
            n,
            ms(end - stopped)
        );
    }
    println!("total time {}", human(began.elapsed()));
    Ok(())
}

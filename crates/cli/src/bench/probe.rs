//! `nodeplugins bench probe`: what one plugin's registration server costs
//! the agent's client. `--count` times, it opens a new connection to
//! `--socket` the way the agent does, calls GetInfo twice on it and drops
//! it. The first figure (dial and first GetInfo) is what every registration
//! pays before any work of the agent's; the second is a warm call. Prints
//! one JSON line with the p50 and p90 of each, in microseconds, in the same
//! shape as `interop/bin/registration-probe` (the same on grpc-go).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use super::registrar::{dial, get_info};

/// `nodeplugins bench probe` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    /// The plugin's registration socket.
    #[arg(long)]
    socket: PathBuf,
    /// Connections to open, one after the other.
    #[arg(long, default_value_t = 200)]
    count: usize,
    /// Idle milliseconds between connections, so each finds the plugin idle
    /// as a registration would.
    #[arg(long, default_value_t = 5)]
    pause_ms: u64,
}

/// Probes the socket and prints the result line.
pub(crate) async fn run_probe(args: ProbeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.count > 0, "--count must be at least 1");
    let mut first = Vec::with_capacity(args.count);
    let mut second = Vec::with_capacity(args.count);
    for _ in 0..args.count {
        let (f, s) = probe(&args.socket).await?;
        first.push(f);
        second.push(s);
        tokio::time::sleep(Duration::from_millis(args.pause_ms)).await;
    }
    let line = serde_json::json!({
        "event": "result",
        "client": "nodeplugins",
        "n": args.count,
        "first": percentiles(&mut first),
        "second": percentiles(&mut second),
    });
    println!("{line}");
    Ok(())
}

/// One connection: the dial with the first GetInfo, and the second GetInfo.
async fn probe(socket: &Path) -> anyhow::Result<(Duration, Duration)> {
    let start = Instant::now();
    let mut connection = dial(socket).await?;
    get_info(&mut connection).await.context("first GetInfo")?;
    let first_done = Instant::now();
    get_info(&mut connection).await.context("second GetInfo")?;
    Ok((first_done - start, first_done.elapsed()))
}

/// The p50 and p90 of `samples`, in microseconds.
fn percentiles(samples: &mut [Duration]) -> serde_json::Value {
    samples.sort();
    let at = |p: f64| {
        let index = ((samples.len().saturating_sub(1)) as f64 * p).round() as usize;
        samples.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    serde_json::json!({ "p50": at(0.5), "p90": at(0.9) })
}

//! `example-csi-driver`: a small CSI node driver (Identity and Node), for
//! trying the CSI registrar and agent: with `--state-dir` it serves
//! volumes, each a directory there bind-mounted where the node publishes
//! it (staged first with `--stage`, grown on the node with `--expand`).

use std::path::PathBuf;

use clap::Parser;
use nodeplugins_sdk::api::transport::{BoundSocket, serve};
use nodeplugins_sdk::csi_driver::CsiNodeDriver;
use nodeplugins_sdk::signals::shutdown_on_signals;
use nodeplugins_sdk_bins::LogFlags;

/// A minimal CSI node driver.
#[derive(Debug, Parser)]
#[command(name = "example-csi-driver", version)]
struct Flags {
    /// Where to serve CSI, as unix://PATH.
    #[arg(long)]
    endpoint: String,
    /// This node's identifier in the driver.
    #[arg(long)]
    node_id: String,
    /// The driver name.
    #[arg(long, default_value = "csi.example.com")]
    driver_name: String,
    /// Volumes the node can attach (0 means no limit).
    #[arg(long, default_value_t = 8)]
    max_volumes: i64,
    /// The node's zone, reported as accessible topology.
    #[arg(long, default_value = "zone-a")]
    zone: String,
    /// Serve volumes, each a directory under this one.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Advertise STAGE_UNSTAGE_VOLUME: persistent volumes are staged before
    /// they are published.
    #[arg(long, requires = "state_dir")]
    stage: bool,
    /// Advertise EXPAND_VOLUME: a volume grown on the node records the
    /// size asked.
    #[arg(long, requires = "state_dir")]
    expand: bool,
    /// Append every node call served to this file, one JSON line each.
    #[arg(long)]
    call_log: Option<PathBuf>,
    /// Answer every call of a node method with an error, to try a node's
    /// failure handling: METHOD=CODE (NodePublishVolume=DeadlineExceeded).
    #[arg(long, value_parser = parse_failure)]
    fail: Vec<(String, nodeplugins_sdk::tonic::Code)>,
    #[command(flatten)]
    log: LogFlags,
}

/// `METHOD=CODE`, the code by its gRPC name.
fn parse_failure(text: &str) -> Result<(String, nodeplugins_sdk::tonic::Code), String> {
    use nodeplugins_sdk::tonic::Code;
    let (method, code) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: not METHOD=CODE"))?;
    let code = [
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
    ]
    .into_iter()
    .find(|c| format!("{c:?}") == code)
    .ok_or_else(|| {
        format!("{code:?}: not a gRPC code name (DeadlineExceeded, InvalidArgument...)")
    })?;
    Ok((method.to_string(), code))
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.log.init();
    let path = PathBuf::from(
        flags
            .endpoint
            .strip_prefix("unix://")
            .unwrap_or(&flags.endpoint),
    );
    let mut driver = CsiNodeDriver::new(&flags.driver_name, flags.node_id)
        .max_volumes_per_node(flags.max_volumes)
        .topology(format!("topology.{}/zone", flags.driver_name), flags.zone);
    if let Some(dir) = &flags.state_dir {
        std::fs::create_dir_all(dir)?;
        driver = driver.volumes(dir, flags.stage);
        if flags.expand {
            driver = driver.expands();
        }
    }
    if let Some(log) = &flags.call_log {
        driver = driver.call_log(log)?;
    }
    for (method, code) in flags.fail.iter().cloned() {
        driver = driver.fail(method, code);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = shutdown_on_signals()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let socket = BoundSocket::bind(&path, None).await?;
        tracing::info!(socket = %path.display(), driver = %driver.name(), "CSI driver serving");
        serve(socket, driver.router(), shutdown).await?;
        anyhow::Ok(())
    })
}

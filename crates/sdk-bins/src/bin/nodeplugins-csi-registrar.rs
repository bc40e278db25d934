//! `nodeplugins-csi-registrar`: a drop-in replacement for the
//! node-driver-registrar sidecar, taking the same flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use nodeplugins_sdk::csi_registrar::{CsiRegistrar, Outcome};
use nodeplugins_sdk::logging::{self, LogFormat};
use nodeplugins_sdk::signals::shutdown_on_signals;

/// Registers a CSI driver with the kubelet's plugin manager.
#[derive(Debug, Parser)]
#[command(name = "nodeplugins-csi-registrar", version)]
struct Flags {
    /// The CSI driver's socket, as seen by this container.
    #[arg(long, default_value = "/run/csi/socket")]
    csi_address: String,
    /// The CSI driver's socket, as the kubelet sees it.
    #[arg(long)]
    kubelet_registration_path: String,
    /// The kubelet's plugin registration directory, as seen by this container.
    #[arg(long, default_value = "/registration")]
    plugin_registration_path: PathBuf,
    /// Serve /healthz on this address (host:port).
    #[arg(long)]
    http_endpoint: Option<String>,
    /// Timeout of calls to the CSI driver, such as 1s or 500ms.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    timeout: Duration,
    /// Log verbosity, as node-driver-registrar's (0-10; 5 and up is debug),
    /// used unless --log-level is given.
    #[arg(long = "v", default_value_t = 2)]
    verbosity: u8,
    /// Log line format: text or json.
    #[arg(long, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or TARGET=LEVEL
    /// directives; RUST_LOG overrides it.
    #[arg(long)]
    log_level: Option<String>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?}"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" | "" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown unit in {text:?}; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

fn http_endpoint(text: &str) -> anyhow::Result<SocketAddr> {
    // node-driver-registrar accepts ":9809" meaning every interface.
    let text = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_string()
    };
    Ok(text.parse()?)
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let level = flags.log_level.clone().unwrap_or_else(|| {
        let level = if flags.verbosity >= 5 {
            "debug"
        } else {
            "info"
        };
        level.to_string()
    });
    logging::init(flags.log_format, &level);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(async {
        let shutdown = shutdown_on_signals()?;
        let csi_address = flags
            .csi_address
            .strip_prefix("unix://")
            .unwrap_or(&flags.csi_address);
        let mut registrar = CsiRegistrar::builder(
            PathBuf::from(csi_address),
            flags.kubelet_registration_path,
            flags.plugin_registration_path,
        )
        .timeout(flags.timeout);
        if let Some(addr) = flags.http_endpoint.as_deref() {
            registrar = registrar.http_endpoint(http_endpoint(addr)?);
        }
        anyhow::Ok(registrar.start(shutdown).await?.wait().await?)
    })?;
    match outcome {
        Outcome::Stopped => Ok(()),
        Outcome::Rejected(reason) => {
            tracing::error!(%reason, "the kubelet rejected the driver; exiting so it can be restarted");
            std::process::exit(1);
        }
    }
}

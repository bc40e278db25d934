//! `nodeplugins-csi-registrar`: a drop-in replacement for the
//! node-driver-registrar sidecar. It takes every flag node-driver-registrar
//! v2.17 takes, with the same meaning, written the way Go programs take
//! them (`-v=5` as well as `--v=5`, `--enable-pprof` alone or `=true`,
//! durations such as `1m30s`), so that a DaemonSet's args and its liveness
//! probe command work unchanged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use nodeplugins_api::duration::parse_go_duration;
use nodeplugins_sdk::csi_registrar::{CsiRegistrar, Outcome, probe_registered};
use nodeplugins_sdk::logging::{self, LogFormat};
use nodeplugins_sdk::signals::shutdown_on_signals;

/// The mode that checks whether the registration succeeded and exits.
const PROBE_MODE: &str = "kubelet-registration-probe";

/// Registers a CSI driver with the kubelet's plugin manager.
#[derive(Debug, Parser)]
#[command(name = "nodeplugins-csi-registrar", version)]
struct Flags {
    /// The CSI driver's socket, as seen by this container.
    #[arg(long, default_value = "/run/csi/socket")]
    csi_address: String,
    /// The CSI driver's socket, as the kubelet sees it (required).
    #[arg(long, default_value = "")]
    kubelet_registration_path: String,
    /// The kubelet's plugin registration directory, as seen by this container.
    #[arg(long, default_value = "/registration")]
    plugin_registration_path: PathBuf,
    /// Serve /healthz on this address (HOST:PORT, or :PORT for every
    /// interface). Only one of --health-port and --http-endpoint.
    #[arg(long, default_value = "")]
    http_endpoint: String,
    /// (Deprecated) serve /healthz on this TCP port of every interface; 0
    /// for none. Only one of --health-port and --http-endpoint.
    #[arg(long, default_value_t = 0)]
    health_port: u16,
    /// Timeout of each call to the CSI driver, such as 1s or 1m30s.
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    timeout: Duration,
    /// (Deprecated, no effect) as in node-driver-registrar.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    connection_timeout: Duration,
    /// `kubelet-registration-probe`: exit 0 if the registrar running in
    /// this container was told by the kubelet that the driver is
    /// registered, 1 otherwise (an exec liveness probe). Any other value
    /// registers the driver.
    #[arg(long, default_value = "")]
    mode: String,
    /// Go's profiling endpoints on the HTTP endpoint: accepted; this
    /// program is not a Go program and serves none.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
        default_value = "false", default_missing_value = "true")]
    enable_pprof: bool,
    /// Log verbosity, as node-driver-registrar's (0-10; 5 and up is debug),
    /// used unless --log-level is given.
    #[arg(short = 'v', long = "v", default_value_t = 2)]
    verbosity: u8,
    /// Log line format: text or json (node-driver-registrar's flag).
    #[arg(long)]
    logging_format: Option<LogFormat>,
    /// Log line format: text or json; --logging-format wins.
    #[arg(long, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or TARGET=LEVEL
    /// directives; RUST_LOG overrides it.
    #[arg(long)]
    log_level: Option<String>,
    /// Per-file verbosity of Go's logger: accepted, not used (use
    /// --log-level with TARGET=LEVEL directives).
    #[arg(long, default_value = "")]
    vmodule: String,
    /// Go's log flushing interval: accepted; lines are written at once.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    log_flush_frequency: Duration,
    /// Go's JSON log buffering: accepted; lines are written at once.
    #[arg(long, default_value = "0")]
    log_json_info_buffer_size: String,
    /// Go's split of JSON info and error lines: accepted; every line goes
    /// to standard error.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
        default_value = "false", default_missing_value = "true")]
    log_json_split_stream: bool,
    /// Go's text log buffering: accepted; lines are written at once.
    #[arg(long, default_value = "0")]
    log_text_info_buffer_size: String,
    /// Go's split of text info and error lines: accepted; every line goes
    /// to standard error.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
        default_value = "false", default_missing_value = "true")]
    log_text_split_stream: bool,
}

/// The command line as Go's flag package reads it: `-name` is `--name`.
/// A lone letter (`-v=5`) is left as it is.
fn go_style(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = false;
    for arg in args {
        if rest || arg == "--" {
            rest = true;
            out.push(arg);
            continue;
        }
        let name = arg.split('=').next().unwrap_or_default();
        if arg.starts_with('-') && !arg.starts_with("--") && name.len() > 2 {
            out.push(format!("-{arg}"));
        } else {
            out.push(arg);
        }
    }
    out
}

/// Where to serve /healthz, from --http-endpoint or --health-port.
fn health_address(flags: &Flags) -> anyhow::Result<Option<SocketAddr>> {
    if flags.health_port > 0 && !flags.http_endpoint.is_empty() {
        anyhow::bail!("only one of `--health-port` and `--http-endpoint` can be set");
    }
    let text = if flags.health_port > 0 {
        format!(":{}", flags.health_port)
    } else if flags.http_endpoint.is_empty() {
        return Ok(None);
    } else {
        flags.http_endpoint.clone()
    };
    // ":9809" means every interface, as Go's net.Listen reads it.
    let text = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text
    };
    Ok(Some(text.parse()?))
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse_from(go_style(std::env::args()));
    let level = flags.log_level.clone().unwrap_or_else(|| {
        let level = if flags.verbosity >= 5 {
            "debug"
        } else {
            "info"
        };
        level.to_string()
    });
    logging::init(flags.logging_format.unwrap_or(flags.log_format), &level);
    if flags.kubelet_registration_path.is_empty() {
        tracing::error!("kubelet-registration-path is a required parameter");
        std::process::exit(1);
    }
    if flags.mode == PROBE_MODE {
        match probe_registered(&flags.kubelet_registration_path) {
            Ok(driver) => {
                tracing::info!(%driver, "kubelet plugin registration succeeded");
                std::process::exit(0);
            }
            Err(e) => {
                tracing::error!(error = %e, "kubelet plugin registration probe failed");
                std::process::exit(1);
            }
        }
    }
    let health = match health_address(&flags) {
        Ok(health) => health,
        Err(e) => {
            tracing::error!(error = %e, "bad flags");
            std::process::exit(1);
        }
    };
    if !flags.connection_timeout.is_zero() {
        tracing::info!("--connection-timeout is deprecated and has no effect");
    }
    if flags.enable_pprof {
        tracing::warn!(
            "--enable-pprof: this registrar is not a Go program and serves no profiling endpoints"
        );
    }
    if !flags.vmodule.is_empty() {
        tracing::warn!(vmodule = %flags.vmodule, "--vmodule is not used; use --log-level with TARGET=LEVEL directives");
    }
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
            flags.kubelet_registration_path.clone(),
            flags.plugin_registration_path.clone(),
        )
        .timeout(flags.timeout);
        if let Some(addr) = health {
            registrar = registrar.http_endpoint(addr);
        }
        anyhow::Ok(registrar.start(shutdown).await?.wait().await?)
    })?;
    if let Outcome::Rejected(reason) = outcome {
        tracing::error!(%reason, "the kubelet rejected the driver; exiting so it can be restarted");
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let line = std::iter::once("nodeplugins-csi-registrar")
            .chain(args.iter().copied())
            .map(String::from);
        match Flags::try_parse_from(go_style(line)) {
            Ok(flags) => flags,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn a_daemonsets_args_are_read_as_node_driver_registrar_reads_them() {
        let f = flags(&[
            "-v=5",
            "-csi-address=/csi/csi.sock",
            "--kubelet-registration-path",
            "/var/lib/kubelet/plugins/example/csi.sock",
            "--health-port=9809",
            "--timeout=1m30s",
            "--connection-timeout=15s",
            "--enable-pprof",
            "--logging-format=json",
            "--log-flush-frequency=10s",
        ]);
        assert_eq!(f.verbosity, 5);
        assert_eq!(f.csi_address, "/csi/csi.sock");
        assert_eq!(
            f.kubelet_registration_path,
            "/var/lib/kubelet/plugins/example/csi.sock"
        );
        assert_eq!(f.timeout, Duration::from_secs(90));
        assert_eq!(f.connection_timeout, Duration::from_secs(15));
        assert!(f.enable_pprof);
        assert_eq!(f.logging_format, Some(LogFormat::Json));
        assert_eq!(
            health_address(&f).ok().flatten(),
            "0.0.0.0:9809".parse().ok()
        );
        assert!(!flags(&["--enable-pprof=false"]).enable_pprof);
        assert_eq!(
            flags(&["--mode=kubelet-registration-probe"]).mode,
            PROBE_MODE
        );
        assert_eq!(flags(&["-mode", "registration"]).mode, "registration");
    }

    #[test]
    fn both_health_flags_are_refused_as_upstream_refuses_them() {
        let f = flags(&["--health-port=9809", "--http-endpoint=:9810"]);
        assert!(health_address(&f).is_err());
        let f = flags(&["--http-endpoint=127.0.0.1:9810"]);
        assert_eq!(
            health_address(&f).ok().flatten(),
            "127.0.0.1:9810".parse().ok()
        );
        assert_eq!(health_address(&flags(&[])).ok().flatten(), None);
    }

    #[test]
    fn go_durations_are_taken_and_bad_ones_refused() {
        assert_eq!(
            flags(&["--timeout=2h45m"]).timeout,
            Duration::from_secs(9900)
        );
        let bad = go_style(["x", "--timeout=30"].into_iter().map(String::from));
        assert!(Flags::try_parse_from(bad).is_err());
    }
}

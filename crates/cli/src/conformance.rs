//! The `conformance` command line: flags, the run, the report on standard
//! output, a JUnit file, and the exit status.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use nodeplugins_conformance::Conformance;

use crate::output::conformance::RunInfo;
use crate::output::{self, Format};
use nodeplugins_api::duration::parse_go_duration;

/// Flags of `nodeplugins conformance`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("meeting").required(true).args(["registry", "kubelet_dir"])))]
pub(crate) struct ConformanceArgs {
    /// Meet the plugin through its registration socket: this socket, or the
    /// first socket to appear in this directory (a plugins_registry).
    #[arg(long, value_name = "SOCKET_OR_DIR")]
    registry: Option<PathBuf>,
    /// Serve the device plugin `kubelet.sock` in this directory and meet
    /// the device plugin that registers on it.
    #[arg(long, value_name = "DIR")]
    kubelet_dir: Option<PathBuf>,
    /// Start the plugin with this command line (`sh -c`), after the tool's
    /// own socket is served; stop it at the end.
    #[arg(long, value_name = "COMMAND")]
    exec: Option<String>,
    /// Also run the restart rules: the plugin stopped and started again
    /// (needs --exec), or kubelet.sock made again.
    #[arg(long)]
    restarts: bool,
    /// The claims the DRA rules prepare: a JSON list of
    /// {"uid","namespace","name","fails"} [default: two made-up claims].
    #[arg(long, value_name = "FILE", conflicts_with = "kubeconfig")]
    claims: Option<PathBuf>,
    /// Take the DRA rules' claims from the API server: every ResourceClaim
    /// allocated to the driver, and one that does not exist (which the
    /// driver must fail alone).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Narrow every call's deadline to this. Without it each call has the
    /// kubelet's own: GetInfo 1 s, NotifyRegistrationStatus 5 s,
    /// PreStartContainer 30 s, DRA calls 45 s; the calls the kubelet waits
    /// on without one (Allocate, GetPreferredAllocation, the first device
    /// list) 45 s.
    #[arg(long, value_parser = parse_go_duration)]
    timeout: Option<Duration>,
    /// How long a plugin may take to register again after a restart.
    #[arg(long, value_parser = parse_go_duration, default_value = "30s")]
    restart_timeout: Duration,
    /// Report only these rules: ids, or prefixes ending at a dot
    /// (`device.allocate` is it and every `device.allocate.*`),
    /// comma-separated. The others show as SKIP and fail nothing.
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    rules: Vec<String>,
    /// Leave these rules out (ids or prefixes, comma-separated): they show
    /// as SKIP and fail nothing.
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    skip: Vec<String>,
    /// A directory of CDI spec files the container runtime reads (repeat
    /// for several, such as /etc/cdi and /var/run/cdi): every CDI device id
    /// a DRA driver answers with must be named by a spec there. Without
    /// it, ids are checked for their form only.
    #[arg(long = "cdi-dir", value_name = "DIR")]
    cdi_dirs: Vec<PathBuf>,
    /// Also write the outcomes as a JUnit XML report (one test case per rule).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Runs the rules, prints the report, and fails when a rule failed (exit
/// status 1) or the run could not be made ([`RunError`], 3).
///
/// [`RunError`]: nodeplugins_conformance::RunError
pub(crate) async fn run(args: ConformanceArgs) -> anyhow::Result<()> {
    let mut conformance = match (args.registry, args.kubelet_dir) {
        (Some(path), _) => Conformance::registration(path),
        (None, Some(dir)) => Conformance::device_plugin(dir),
        (None, None) => anyhow::bail!("give --registry or --kubelet-dir"),
    };
    if let Some(exec) = args.exec {
        conformance = conformance.exec(exec);
    }
    if let Some(claims) = args.claims {
        conformance = conformance.claims(claims);
    }
    if let Some(kubeconfig) = args.kubeconfig {
        conformance = conformance.kubeconfig(kubeconfig);
    }
    if let Some(timeout) = args.timeout {
        conformance = conformance.timeout(timeout);
    }
    let conformance = conformance
        .restarts(args.restarts)
        .restart_timeout(args.restart_timeout)
        .rules(args.rules)
        .skip(args.skip)
        .cdi_dirs(args.cdi_dirs);
    let run = RunInfo::now();
    let report = conformance.run().await;
    // The JUnit file is written whatever happens: a CI reporter pointed at
    // it shows a run that could not start rather than nothing.
    if let Some(file) = &args.junit {
        let xml = match &report {
            Ok(report) => output::conformance::junit(report, &run),
            Err(why) => output::conformance::junit_error(&why.to_string(), &run),
        };
        std::fs::write(file, xml).with_context(|| format!("write {}", file.display()))?;
    }
    let report = report?;
    let mut out = std::io::stdout().lock();
    output::conformance::report(&report, args.output, &mut out)?;
    match report.failures() {
        0 => Ok(()),
        n => anyhow::bail!("{n} of {} rules failed", report.outcomes.len()),
    }
}

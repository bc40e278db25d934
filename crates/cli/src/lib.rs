//! `nodeplugins`: run the node agent and inspect it. The command line is
//! [`run`]. Its `conformance` and `check` commands print what the
//! `nodeplugins-conformance` crate finds; plugin authors who check their
//! plugin in `cargo test` use that crate.

mod agent_run;
mod bench;
mod commands;
mod config;
mod conformance;
mod demo;
mod failure;
mod kubelet;
mod output;
mod pod_resources;

use std::process::ExitCode;

use clap::Parser;

/// Runs the `nodeplugins` command line: parses the process's arguments,
/// runs the command, and returns its exit status.
pub fn run() -> ExitCode {
    // Run under the name `kubelet` (a link, as a kubeadm node's unit
    // starts it), the command line is the kubelet's.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as_kubelet = args
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .is_some_and(|name| name == "kubelet");
    if invoked_as_kubelet {
        args.insert(1, "kubelet".into());
    }
    let cli = commands::Cli::parse_from(args);
    // The TLS stack of the kubelet's API (the API client picks its own
    // provider). Installed once per process; a second call only says so.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = match commands::agent_threads(&cli) {
        // The agent on the main thread; blocking work still goes to the
        // blocking pool.
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(threads) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder
        // The agent's futures nest deeply; unoptimised builds need more than
        // the default 2 MiB when it runs on a worker (as in `demo`).
        .thread_stack_size(8 << 20)
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(commands::dispatch(cli)),
        Err(e) => Err(anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    failure::exit_code(result)
}

//! How soon our SDK's device plugin is back after a kubelet restart: the
//! kubelet's own device-plugin registration server
//! (`interop/bin/kubelet-plugins`) is killed and started again on the same
//! root, which removes every socket in `device-plugins/` and serves a new
//! `kubelet.sock`; the time is from the new server's `started` event to the
//! plugin being connected to it again, both stamped by the kubelet's
//! process.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench kubelet_restart` (builds
//! the Go programs of `interop/` first if they are missing).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::{GoProcess, ts};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::stats::percentiles;
use serde_json::Value;
use tokio::process::Command;

const RESOURCE: &str = "example.com/device";
const RESTARTS: usize = 30;
const TIMEOUT: Duration = Duration::from_secs(30);

async fn start_kubelet(root: &Path) -> (GoProcess, Value) {
    let mut kubelet = GoProcess::start(
        "kubelet-plugins",
        [
            "--registry-dir",
            root.join("plugins_registry").to_str().unwrap(),
            "--kubelet-sock",
            root.join("device-plugins/kubelet.sock").to_str().unwrap(),
        ],
    );
    let started = kubelet.event(TIMEOUT, "started", |_| true).await;
    (kubelet, started)
}

#[tokio::main]
async fn main() {
    let root = tempfile::tempdir().unwrap();
    let (mut kubelet, _) = start_kubelet(root.path()).await;
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command
        .arg("--root-dir")
        .arg(root.path())
        .args(["--devices", "4"]);
    let _plugin = ChildProcess::spawn("example-device-plugin", command);
    kubelet
        .event(TIMEOUT, "device_plugin_connected", |v| {
            v["resource"] == RESOURCE
        })
        .await;
    let mut gaps = Vec::with_capacity(RESTARTS);
    for _ in 0..RESTARTS {
        kubelet.kill().await;
        let (mut again, started) = start_kubelet(root.path()).await;
        let back = again
            .event(TIMEOUT, "device_plugin_connected", |v| {
                v["resource"] == RESOURCE
            })
            .await;
        gaps.push(Duration::from_nanos(
            u64::try_from(ts(&back) - ts(&started)).unwrap_or(0),
        ));
        kubelet = again;
    }
    println!(
        "{}",
        percentiles("device plugin back after a kubelet restart", gaps)
    );
}

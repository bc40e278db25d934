//! How `nodeplugins conformance --exec` runs the plugin it tests: a plugin
//! that exits before registering fails at once with its exit status and
//! last words, not after the start timeout; and the plugin's command line
//! runs in a process group of its own, stopped as a whole, so a command
//! line that does not `exec` its plugin leaves no orphan behind.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use nodeplugins_test_support::binaries::binary;
use serde_json::Value;
use tokio::process::Command;

/// `nodeplugins conformance --kubelet-dir DIR --exec EXEC ARGS -o json`:
/// its report.
async fn conformance(dir: &Path, exec: &str, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .arg("conformance")
        .arg("--kubelet-dir")
        .arg(dir)
        .args(["--exec", exec])
        .args(args)
        .args(["-o", "json"])
        .output()
        .await
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_that_exits_before_registering_fails_at_once_saying_why() {
    let root = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let report = conformance(
        &root.path().join("device-plugins"),
        "echo 'cannot open /dev/gpu0' >&2; exit 3",
        &["--restart-timeout", "60s"],
    )
    .await;
    let first = &report["outcomes"][0];
    assert_eq!(first["id"], "device.register", "{report:#}");
    assert_eq!(first["verdict"], "FAIL");
    let detail = first["detail"].as_str().unwrap();
    assert!(detail.contains("exit status: 3"), "{detail}");
    assert!(detail.contains("cannot open /dev/gpu0"), "{detail}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed at once, not after the 60 s start timeout: {:?}",
        started.elapsed()
    );
}

/// Whether a process whose command line contains `marker` is running.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_started_without_exec_is_stopped_with_its_shell() {
    let root = tempfile::tempdir().unwrap();
    // A resource name no other test uses marks the plugin's process.
    let resource = format!("example.com/orphan-{}", std::process::id());
    let plugin = binary("nodeplugins-sdk-bins", "example-device-plugin");
    // Not `exec`: the shell stays, the plugin is its child, and a SIGTERM
    // to the shell alone would leave the plugin running.
    let exec = format!(
        "{} --root-dir {} --resource {resource} --devices 2; true",
        plugin.display(),
        root.path().display()
    );
    let report = conformance(&root.path().join("device-plugins"), &exec, &[]).await;
    assert_eq!(report["outcomes"][0]["verdict"], "PASS", "{report:#}");
    assert!(!running(&resource), "the plugin outlived the tool's run");
}

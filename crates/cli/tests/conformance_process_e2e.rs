//! How `nodeplugins conformance --exec` runs the plugin it tests and
//! reports: a plugin that exits before registering fails at once with its
//! exit status and last words, not after the start timeout; the plugin's
//! command line runs in a process group of its own, stopped as a whole, so
//! a command line that does not `exec` its plugin leaves no orphan behind;
//! and the JUnit file is one a strict reader (Python's junitparser) takes,
//! written even when the run stops before any rule.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::python::python_env;
use serde_json::{Value, json};
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
    // Every other rule is reported, as not run for that failure.
    let outcomes = report["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 15, "{report:#}");
    for outcome in &outcomes[1..] {
        assert_eq!(outcome["verdict"], "SKIP", "{outcome}");
        assert_eq!(
            outcome["detail"],
            "not run: device.register failed before it"
        );
    }
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

/// The JUnit file as junitparser reads it.
async fn read_junit(file: &Path) -> Value {
    let out = python_env()
        .script("junit_report.py")
        .arg(file)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "junitparser refused {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_junit_report_is_read_by_a_junit_parser_case_by_case() {
    let root = tempfile::tempdir().unwrap();
    let junit = root.path().join("junit.xml");
    let plugin = binary("nodeplugins-sdk-bins", "example-device-plugin");
    let exec = format!(
        "exec {} --root-dir {} --resource example.com/gpu --devices 2",
        plugin.display(),
        root.path().display()
    );
    let junit_arg = junit.display().to_string();
    let report = conformance(
        &root.path().join("device-plugins"),
        &exec,
        &[
            "--junit",
            &junit_arg,
            "--skip",
            "device.allocate.concurrent",
        ],
    )
    .await;
    let skipped = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "device.allocate.concurrent")
        .unwrap();
    assert_eq!(skipped["verdict"], "SKIP");
    assert_eq!(
        skipped["detail"],
        "left out by --skip device.allocate.concurrent"
    );
    let read = read_junit(&junit).await;
    let suite = &read["suites"][0];
    let outcomes = report["outcomes"].as_array().unwrap();
    let count = |verdict: &str| outcomes.iter().filter(|o| o["verdict"] == verdict).count();
    assert_eq!(suite["tests"], outcomes.len(), "{read:#}");
    assert_eq!(suite["failures"], count("FAIL"));
    assert_eq!(suite["skipped"], count("SKIP"));
    assert_eq!(suite["errors"], 0);
    assert!(suite["timestamp"].as_str().unwrap().starts_with("20"));
    assert!(!suite["hostname"].as_str().unwrap().is_empty());
    // Each rule is its case, with its verdict.
    for (case, outcome) in suite["cases"].as_array().unwrap().iter().zip(outcomes) {
        assert_eq!(case["name"], outcome["id"]);
        let expected = match outcome["verdict"].as_str().unwrap() {
            "PASS" | "WARN" => "passed",
            "FAIL" => "failure",
            _ => "skipped",
        };
        assert_eq!(case["result"], expected, "{case}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_stops_before_any_rule_exits_3_and_still_writes_its_junit_report() {
    let root = tempfile::tempdir().unwrap();
    let junit = root.path().join("junit.xml");
    let out = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .arg("conformance")
        .arg("--registry")
        .arg(root.path().join("plugins_registry"))
        .arg("--claims")
        .arg(root.path().join("no-such-claims.json"))
        .arg("--junit")
        .arg(&junit)
        .output()
        .await
        .unwrap();
    // 3: the tool could not run; 1 is kept for a plugin that fails.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = read_junit(&junit).await;
    let suite = &read["suites"][0];
    assert_eq!(
        (&suite["tests"], &suite["errors"]),
        (&json!(1), &json!(1)),
        "{read:#}"
    );
    assert_eq!(suite["cases"][0]["result"], "error");
}

//! The `nodeplugins bench` helpers that other benchmarks lean on: the bare
//! registrar (the baseline of `scripts/bench-vs-kubelet`) registers what
//! appears in its directory, and the probe (`scripts/bench-plugin-cost`)
//! reports one line of figures for the connections it made.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodeplugins_test_support::fake_plugin::FakePlugin;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, watch_until};
use tokio::process::Command;

#[tokio::test]
async fn the_bare_registrar_notifies_a_plugin_created_in_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .args(["bench", "registrar", "--dir"])
        .arg(dir.path());
    let mut registrar = ChildProcess::spawn("nodeplugins bench registrar", command);
    // A plugin created before the watch is set up would be missed.
    registrar
        .wait_for_line(TIMEOUT, |line| line.contains(r#""event":"watching""#))
        .await;
    let plugin = FakePlugin::builder("CSIPlugin", "probe.example.com")
        .serve(dir.path().join("probe.sock"))
        .await;
    let notified = watch_until(
        "the plugin notified",
        &mut plugin.notifications(),
        TIMEOUT,
        |n| !n.is_empty(),
    )
    .await;
    assert!(notified[0].plugin_registered, "{notified:?}");
}

#[tokio::test]
async fn the_probe_reports_the_first_and_second_call_of_each_connection() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = FakePlugin::builder("CSIPlugin", "probe.example.com")
        .serve(dir.path().join("probe.sock"))
        .await;
    let output = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args([
            "bench",
            "probe",
            "--count",
            "5",
            "--pause-ms",
            "0",
            "--socket",
        ])
        .arg(plugin.socket())
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(line["n"], 5);
    for call in ["first", "second"] {
        let (p50, p90) = (
            line[call]["p50"].as_f64().unwrap(),
            line[call]["p90"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p90, "{call}: {line}");
    }
    assert_eq!(
        *plugin.get_info_calls().borrow(),
        10,
        "two GetInfo calls per connection"
    );
}

#[tokio::test]
async fn the_probe_fails_with_the_socket_named_when_nothing_listens() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent.sock");
    let output = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(["bench", "probe", "--count", "1", "--socket"])
        .arg(&absent)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&absent.display().to_string()), "{stderr}");
}

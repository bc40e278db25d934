//! Registration (a CSI plugin serving Registration and CSI on one socket).

use std::path::Path;

use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::TIMEOUT;

use super::common::{plugin_when, status_json};
use super::{agent_up, expect_crash};

const CSI_NAME: &str = "py.example.com";

fn csi_plugin(socket: &Path, crash_at: Option<&str>) -> ChildProcess {
    let mut command = python_env().script("registration_server.py");
    command
        .arg(socket)
        .args(["--type", "CSIPlugin", "--name", CSI_NAME]);
    if let Some(step) = crash_at {
        command.args(["--crash-at", step]);
    }
    ChildProcess::spawn("registration_server.py", command)
}

async fn csi_drivers(root: &Path) -> Vec<String> {
    let status = status_json(root).await.unwrap();
    status["csi_drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

/// Crashes a CSI plugin at `step`, checks the state `check` expects, then
/// restarts it on the same socket and sees it registered exactly once.
/// Returns the plugin's row after the crash, and the CSI drivers then.
async fn csi_crash(
    step: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> (serde_json::Value, Vec<String>) {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent_up(root.path()).await;
    let registry = root.path().join("plugins_registry");
    let socket = registry.join("crash-reg.sock");
    expect_crash(csi_plugin(&socket, Some(step)), step).await;
    let after_crash = plugin_when(root.path(), &socket, &check).await;
    let drivers_after_crash = csi_drivers(root.path()).await;
    assert!(socket.exists(), "a crash leaves the socket behind");

    // The plugin's restart removes its stale socket and listens again.
    std::fs::remove_file(&socket).unwrap();
    let mut again = csi_plugin(&socket, None);
    let line = again
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY"))
        .await;
    assert_eq!(line, r#"NOTIFY {"registered": true, "error": ""}"#);
    plugin_when(root.path(), &socket, |r| {
        r["state"] == "registered" && r["error"].is_null()
    })
    .await;
    assert_eq!(csi_drivers(root.path()).await, [CSI_NAME]);
    (after_crash, drivers_after_crash)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_crashing_in_get_info_is_failed_and_registers_when_restarted() {
    let (row, _) = csi_crash("get-info", |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(error.starts_with("RegisterPlugin error --"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csi_plugin_crashing_in_node_get_info_is_not_a_driver_and_registers_when_restarted() {
    let (row, _) = csi_crash("node-get-info", |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(error.contains("NodeGetInfo"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_crashing_in_notify_is_failed_forgotten_and_registers_when_restarted() {
    // As upstream: a plugin that cannot be told it is registered is not
    // kept. The handler forgets it (no CSI driver is left behind) and the
    // restarted plugin registers afresh.
    let (row, drivers) = csi_crash("notify", |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(
        error.contains("failed to send registration status"),
        "{error}"
    );
    assert!(drivers.is_empty(), "the handler forgot it: {drivers:?}");
}

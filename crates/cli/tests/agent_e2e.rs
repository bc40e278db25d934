//! `nodeplugins run` and `nodeplugins status` as separate processes, with a
//! plugin written on an independent gRPC stack (Python grpcio).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

async fn wait_plugin_state(root: &Path, socket: &Path, state: &str) -> serde_json::Value {
    plugin_when(root, socket, |p| p["state"] == state).await
}

fn python_plugin(socket: &Path, extra: &[&str]) -> ChildProcess {
    let mut command = python_env().script("registration_server.py");
    command
        .arg(socket)
        .args(["--type", "CSIPlugin", "--name", "py.example.com"])
        .args(extra);
    ChildProcess::spawn("registration_server.py", command)
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcio_plugin_registers_with_the_agent_and_is_notified() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    eventually("agent answering", TIMEOUT, || status_json(root.path())).await;
    let registry = root.path().join("plugins_registry");
    std::fs::create_dir_all(registry.join("csi")).unwrap();
    let socket = registry.join("csi/py.example.com-reg.sock");
    let mut plugin = python_plugin(&socket, &[]);
    plugin.wait_for_line(TIMEOUT, |l| l == "READY").await;
    let line = plugin
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY"))
        .await;
    assert_eq!(line, r#"NOTIFY {"registered": true, "error": ""}"#);

    let row = wait_plugin_state(root.path(), &socket, "registered").await;
    assert_eq!(row["type"], "CSIPlugin");
    assert_eq!(row["name"], "py.example.com");
    assert_eq!(row["endpoint"], socket.to_str().unwrap());
    assert_eq!(row["versions"], serde_json::json!(["1.0.0"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_killed_mid_registration_fails_cleanly_and_its_restart_registers() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    eventually("agent answering", TIMEOUT, || status_json(root.path())).await;
    let socket = root.path().join("plugins_registry/killed-reg.sock");

    let mut stuck = python_plugin(&socket, &["--hang-get-info"]);
    stuck.wait_for_line(TIMEOUT, |l| l == "GETINFO").await;
    drop(stuck); // SIGKILL while the agent waits for GetInfo; the socket file stays.
    let failed = wait_plugin_state(root.path(), &socket, "failed").await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .starts_with("RegisterPlugin error --"),
        "{failed}"
    );
    assert!(socket.exists(), "SIGKILL leaves the socket behind");

    std::fs::remove_file(&socket).unwrap();
    let mut restarted = python_plugin(&socket, &[]);
    let line = restarted
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY"))
        .await;
    assert_eq!(line, r#"NOTIFY {"registered": true, "error": ""}"#);
    wait_plugin_state(root.path(), &socket, "registered").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_stops_on_sigterm_and_removes_its_admin_socket() {
    let root = tempfile::tempdir().unwrap();
    let mut agent = agent(root.path());
    eventually("agent answering", TIMEOUT, || status_json(root.path())).await;
    let admin = root.path().join("nodeplugins/admin.sock");
    assert!(admin.exists());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&admin).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let pid = agent_pid(root.path()).await;
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await
        .unwrap();
    assert_eq!(agent.wait(TIMEOUT).await, Some(0));
    assert!(!admin.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn status_without_an_agent_says_what_is_wrong() {
    let root = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(["status", "--root-dir"])
        .arg(root.path())
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot reach the agent"), "{stderr}");
}

/// The pid of the agent serving `root`, found through /proc.
async fn agent_pid(root: &Path) -> u32 {
    let needle = root.to_str().unwrap().to_string();
    eventually("agent pid", Duration::from_secs(5), || {
        let needle = needle.clone();
        async move {
            std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                (cmdline.contains(" run ") && cmdline.contains(&needle)).then_some(pid)
            })
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn device_plugin_resources_allocate_and_release_through_the_cli() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    eventually("agent answering", TIMEOUT, || status_json(root.path())).await;
    let dir = root.path().join("device-plugins");
    eventually("kubelet.sock", TIMEOUT, || async {
        dir.join("kubelet.sock").exists().then_some(())
    })
    .await;
    let mut command = python_env().script("device_plugin.py");
    command
        .arg("--dir")
        .arg(&dir)
        .args(["--resource", "example.com/dev", "--devices", "4"]);
    let mut plugin = ChildProcess::spawn("device_plugin.py", command);
    assert_eq!(
        plugin
            .wait_for_line(TIMEOUT, |l| l.starts_with("REGISTER"))
            .await,
        "REGISTERED"
    );

    let resources = eventually("4 devices", TIMEOUT, || async {
        let out = cli(root.path(), &["resources", "-o", "json"]).await;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (json["resources"][0]["capacity"] == 4).then_some(json)
    })
    .await;
    assert_eq!(resources["resources"][0]["name"], "example.com/dev");
    assert_eq!(resources["resources"][0]["allocatable"], 4);

    let out = cli(
        root.path(),
        &[
            "allocate",
            "--pod",
            "uid-1",
            "--container",
            "main",
            "example.com/dev=2",
            "-o",
            "json",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = reply["allocations"][0]["devices"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(devices.len(), 2);
    let joined: Vec<&str> = devices.iter().map(|d| d.as_str().unwrap()).collect();
    assert_eq!(
        reply["allocations"][0]["envs"]["PY_DEVICES"],
        joined.join(","),
        "the plugin's Allocate response is shown"
    );

    let table = cli(
        root.path(),
        &[
            "allocate",
            "--pod",
            "uid-1",
            "--container",
            "main",
            "example.com/dev=2",
        ],
    )
    .await;
    assert!(String::from_utf8_lossy(&table.stdout).contains("env        PY_DEVICES="));

    let too_many = cli(
        root.path(),
        &[
            "allocate",
            "--pod",
            "uid-2",
            "--container",
            "c",
            "example.com/dev=3",
        ],
    )
    .await;
    assert!(!too_many.status.success());
    let stderr = String::from_utf8_lossy(&too_many.stderr);
    assert!(stderr.contains("requested number of devices unavailable for example.com/dev. Requested: 3, Available: 2"), "{stderr}");

    let held = cli(root.path(), &["resources", "-o", "json"]).await;
    let held: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
    assert_eq!(held["resources"][0]["allocated"], 2);
    let released = cli(root.path(), &["release", "--pod", "uid-1"]).await;
    assert_eq!(
        String::from_utf8_lossy(&released.stdout).trim(),
        "released 1 allocation(s) of pod uid-1"
    );
    let after = cli(root.path(), &["resources", "-o", "json"]).await;
    let after: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(after["resources"][0]["allocated"], 0);
}

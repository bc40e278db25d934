//! The agent run as an operator runs it, with the things operators do to
//! it: a second agent started on the same root, its sockets deleted, its
//! directories removed and made again, restarts while DRA claims are
//! prepared, commands whose output is cut short; and the SDK's programs'
//! logs read from files.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::Path;
use std::process::Stdio;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

const RESOURCE: &str = "example.com/device";

fn device_plugin(root: &Path, resource: &str) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command
        .arg("--root-dir")
        .arg(root)
        .args(["--resource", resource, "--devices", "2"]);
    ChildProcess::spawn("example-device-plugin", command)
}

/// `nodeplugins run` to its end, with its stderr.
async fn run_to_end(root: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .args(["run", "--metrics-addr", "off", "--root-dir"])
        .arg(root)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tokio::time::timeout(TIMEOUT, command.output())
        .await
        .expect("the agent exits")
        .unwrap()
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_agent_on_the_same_root_refuses_and_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let first = agent(root.path());
    let _plugin = device_plugin(root.path(), RESOURCE);
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 2).await;
    let plugin_socket = root.path().join("device-plugins/example.com_device.sock");
    assert!(plugin_socket.exists());

    let second = run_to_end(root.path(), &[("RUST_BACKTRACE", "1")]).await;
    assert_eq!(second.status.code(), Some(1));
    let pid = first.pid().unwrap();
    assert_eq!(
        last_line(&second.stderr),
        format!(
            "error: root directory {:?} is in use by another nodeplugins agent (pid {pid})",
            root.path()
        ),
        "one line naming the root and the pid"
    );
    assert!(
        plugin_socket.exists(),
        "the first agent's plugin socket is kept"
    );
    let r = resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 2).await;
    assert_eq!(r["instances"].as_array().unwrap().len(), 1);
    let status = status_json(root.path()).await.unwrap();
    assert!(
        status["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["present"] == true)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubelet_sock_and_the_admin_socket_are_served_again_when_deleted() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let _first = device_plugin(root.path(), RESOURCE);
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 2).await;

    let kubelet = root.path().join("device-plugins/kubelet.sock");
    std::fs::remove_file(&kubelet).unwrap();
    let status = eventually("kubelet.sock served again", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        let socket = status["sockets"][0].clone();
        (socket["recreated"] == 1 && socket["present"] == true).then_some(status)
    })
    .await;
    assert_eq!(status["sockets"][0]["path"], kubelet.to_str().unwrap());

    // A device plugin started now can register.
    let _second = device_plugin(root.path(), "example.com/other");
    resource_when(root.path(), "example.com/other", |r| r["allocatable"] == 2).await;

    let admin = root.path().join("nodeplugins/admin.sock");
    std::fs::remove_file(&admin).unwrap();
    let status = eventually("the admin socket served again", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        (status["sockets"][1]["recreated"] == 1).then_some(status)
    })
    .await;
    let addr = status["metrics_addr"].as_str().unwrap();
    let (code, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("nodeplugins_kubelet_socket_recreations_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodeplugins_admin_socket_recreations_total 1"),
        "{metrics}"
    );
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let text = cli(root.path(), &["status"]).await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("kubelet.sock was removed and served again 1 time(s)"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prepared_dra_claims_survive_an_agent_restart() {
    let root = tempfile::tempdir().unwrap();
    let registry = root.path().join("plugins_registry");
    let plugins = root.path().join("plugins");
    std::fs::create_dir_all(&registry).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    let name = "python.dra.example.com";
    let mut agent = agent(root.path());
    let mut command = python_env().script("dra_driver.py");
    command
        .arg("--registration-socket")
        .arg(registry.join("python-reg.sock"))
        .arg("--service-socket")
        .arg(plugins.join("python.sock"))
        .args(["--name", name]);
    let mut driver = ChildProcess::spawn("dra_driver.py", command);
    driver
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY registered=True"))
        .await;
    let prepare = [
        "dra",
        "prepare",
        "--driver",
        name,
        "--claim",
        "ns/gpu/u1",
        "-o",
        "json",
    ];
    let first = cli(root.path(), &prepare).await;
    assert!(first.status.success());
    driver.wait_for_line(TIMEOUT, |l| l == "PREPARE u1").await;

    // The agent is killed and started again.
    signal(&agent, "-KILL").await;
    agent.wait(TIMEOUT).await;
    let _agent = common::agent(root.path());
    let listed = eventually("claims listed after the restart", TIMEOUT, || async {
        let out = cli(root.path(), &["dra", "claims", "-o", "json"]).await;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (json["claims"].as_array()?.len() == 1).then_some(json)
    })
    .await;
    assert_eq!(listed["claims"][0]["driver"], name);
    assert_eq!(listed["claims"][0]["claim"]["uid"], "u1");
    assert_eq!(
        listed["claims"][0]["devices"][0]["cdi_device_ids"][0],
        format!("{name}/gpu=py-u1")
    );
    assert_eq!(listed["checkpoint_error"], serde_json::Value::Null);

    // Prepared again: the recorded result, without a second call.
    dra_driver_when(root.path(), name, |d| {
        d["instances"][0]["connected"] == true
    })
    .await;
    let again = cli(root.path(), &prepare).await;
    assert!(again.status.success());
    let json = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap()
    };
    assert_eq!(json(&again), json(&first));

    // Unprepared by UID alone: the agent knows the driver.
    let out = cli(root.path(), &["dra", "unprepare", "--claim", "ns/gpu/u1"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    driver.wait_for_line(TIMEOUT, |l| l == "UNPREPARE u1").await;
    let prepares = driver
        .output()
        .iter()
        .filter(|l| l.starts_with("PREPARE"))
        .count();
    assert_eq!(prepares, 1, "one prepare call for two prepares");
    let listed = cli(root.path(), &["dra", "claims", "-o", "json"]).await;
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert!(listed["claims"].as_array().unwrap().is_empty());

    // Once unprepared, preparing calls the driver again.
    assert!(cli(root.path(), &prepare).await.status.success());
    driver.wait_for_line(TIMEOUT, |l| l == "PREPARE u1").await;

    // A claim nobody prepared cannot be unprepared without its driver.
    let out = cli(
        root.path(),
        &["dra", "unprepare", "--claim", "ns/x/unknown"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not prepared on this node"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_dra_checkpoint_is_kept_aside_and_reported() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("nodeplugins");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("nodeplugins_dra_checkpoint"), b"{\"version\":1,").unwrap();
    let _agent = agent(root.path());
    let status = eventually("agent status", TIMEOUT, || status_json(root.path())).await;
    let error = status["dra_checkpoint_error"].as_str().unwrap();
    assert!(error.contains("DRA claims checkpoint"), "{error}");
    assert!(error.contains("started without it"), "{error}");
    let kept = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("nodeplugins_dra_checkpoint.corrupt-")
        })
        .count();
    assert_eq!(kept, 1, "the damaged file is moved aside");
    let text = cli(root.path(), &["status"]).await;
    assert!(String::from_utf8_lossy(&text.stdout).contains("WARNING: DRA claims checkpoint"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agents_errors_name_the_part_that_failed() {
    // kubelet.sock cannot be served: a directory is in its place.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("device-plugins/kubelet.sock")).unwrap();
    let out = run_to_end(root.path(), &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let error = last_line(&out.stderr);
    assert!(error.starts_with("error: kubelet.sock: "), "{error}");
    assert!(!error.contains("admin socket"), "{error}");

    // The root directory cannot be created: a file is in the way.
    let file = tempfile::NamedTempFile::new().unwrap();
    let out = run_to_end(&file.path().join("root"), &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let error = last_line(&out.stderr);
    assert!(error.starts_with("error: root directory "), "{error}");
    assert!(!error.contains("watch"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ordinary_failures_print_causes_without_a_backtrace_and_a_closed_stdout_is_quiet() {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(["status", "--root-dir"])
        .arg(root.path())
        .env("RUST_BACKTRACE", "1")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("admin.sock"),
        "names what it could not reach: {stderr}"
    );
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");

    // `nodeplugins status | head -1`: the reader is gone before the output.
    let _agent = agent(root.path());
    eventually("agent status", TIMEOUT, || status_json(root.path())).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(["status", "--root-dir"])
        .arg(root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_programs_write_colour_only_to_a_terminal_and_json_on_request() {
    let root = tempfile::tempdir().unwrap();
    for (format, json) in [("text", false), ("json", true)] {
        let log = root.path().join(format!("driver-{format}.log"));
        let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
        command
            .arg("--root-dir")
            .arg(root.path())
            .args(["--instance", format, "--log-format", format])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        let mut driver = command.spawn().unwrap();
        let text = eventually("the driver logs that it is ready", TIMEOUT, || async {
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains("example DRA driver ready").then_some(text)
        })
        .await;
        driver.kill().await.unwrap();
        assert!(
            !text.contains('\u{1b}'),
            "escape codes in a log file: {text:?}"
        );
        for line in text.lines() {
            let parsed = serde_json::from_str::<serde_json::Value>(line);
            assert_eq!(parsed.is_ok(), json, "{format}: {line}");
        }
    }
}

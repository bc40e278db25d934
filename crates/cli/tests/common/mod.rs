//! Helpers shared by the end-to-end tests: the `nodeplugins` binary as an
//! agent process and as a client command.

#![allow(dead_code, unreachable_pub)]

pub mod claims;
pub mod cluster_drivers;
pub mod kube;
pub mod packaging;
pub mod pods;
pub mod two_nodes;

use std::path::Path;

use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

/// `nodeplugins run --root-dir ROOT` as a child process.
pub fn agent(root: &Path) -> ChildProcess {
    agent_with(root, &[])
}

/// `nodeplugins run --root-dir ROOT ARGS...` as a child process. It logs
/// at `info` unless ARGS name a `--log-level` (`RUST_LOG` would override it).
/// With a kubeconfig its pods run on the simulated runtime unless ARGS name
/// another ([`simulated_unless_named`]).
pub fn agent_with(root: &Path, args: &[&str]) -> ChildProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--root-dir"])
        .arg(root)
        .args(simulated_unless_named(args));
    if args.contains(&"--log-level") {
        command.env_remove("RUST_LOG");
    } else {
        command.env("RUST_LOG", "info");
    }
    ChildProcess::spawn("nodeplugins run", command)
}

/// ARGS of `nodeplugins run`, with `--container-runtime-endpoint simulated`
/// added when they give a kubeconfig and name no runtime: the agent's pods
/// run on the kubelet's containerd endpoint unless told otherwise, and most
/// tests run theirs on the simulated runtime.
pub fn simulated_unless_named<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut args = args.to_vec();
    if args.contains(&"--kubeconfig") && !args.contains(&"--container-runtime-endpoint") {
        args.extend(["--container-runtime-endpoint", "simulated"]);
    }
    args
}

/// `nodeplugins ARGS... --root-dir ROOT`, run to completion.
pub async fn cli(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(args)
        .arg("--root-dir")
        .arg(root)
        .output()
        .await
        .unwrap()
}

/// `nodeplugins status -o json`, or `None` while the agent does not answer.
pub async fn status_json(root: &Path) -> Option<serde_json::Value> {
    let output = cli(root, &["status", "-o", "json"]).await;
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).unwrap())
}

/// Sends `sig` (such as `-TERM`) to `child`.
pub async fn signal(child: &ChildProcess, sig: &str) {
    Command::new("kill")
        .args([sig, &child.pid().unwrap().to_string()])
        .status()
        .await
        .unwrap();
}

/// The first entry of `list` in `status -o json` whose `key` is `value`,
/// once `pred` holds for it; fails the test after the usual timeout.
async fn status_entry_when(
    root: &Path,
    list: &str,
    key: &str,
    value: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let what = format!("{list} entry {key}={value} in the expected state");
    eventually(&what, TIMEOUT, || async {
        let status = status_json(root).await?;
        let entry = status[list]
            .as_array()?
            .iter()
            .find(|e| e[key] == value)?
            .clone();
        pred(&entry).then_some(entry)
    })
    .await
}

/// Device resource `name` in `status -o json`, once `pred` holds.
pub async fn resource_when(
    root: &Path,
    name: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    status_entry_when(root, "resources", "name", name, pred).await
}

/// The registration socket `socket`'s row in `status -o json`, once `pred` holds.
pub async fn plugin_when(
    root: &Path,
    socket: &Path,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let socket = socket.to_str().unwrap();
    status_entry_when(root, "plugins", "socket_path", socket, pred).await
}

/// DRA driver `name` in `dra drivers -o json`, once `pred` holds.
pub async fn dra_driver_when(
    root: &Path,
    name: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    eventually("DRA driver in the expected state", TIMEOUT, || async {
        let out = cli(root, &["dra", "drivers", "-o", "json"]).await;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let d = json["drivers"]
            .as_array()?
            .iter()
            .find(|d| d["name"] == name)?
            .clone();
        pred(&d).then_some(d)
    })
    .await
}

/// A plain HTTP/1.1 GET: the status code and the body.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

/// A request for `count` devices of `resource` for container `main` of pod
/// `pod` (its UID and its name) in namespace `default`.
pub fn main_container(
    pod: &str,
    resource: &str,
    count: usize,
) -> nodeplugins::device::AllocationRequest {
    nodeplugins::device::AllocationRequest::new(pod, "default", pod, "main")
        .resource(resource, count)
}

/// Asks `interop/bin/kubelet-plugins` to `op` (`prepare` or `unprepare`)
/// claim `default/name` with UID `uid` through the kubelet's DRA client
/// for `driver`, and returns the claim's result; fails the test when the
/// call or the claim failed.
pub async fn kubelet_claim_call(
    kubelet: &mut nodeplugins_test_support::go_process::GoProcess,
    op: &str,
    driver: &str,
    name: &str,
    uid: &str,
) -> serde_json::Value {
    let claims = serde_json::json!([{"namespace": "default", "name": name, "uid": uid}]);
    let answer = kubelet
        .request(
            TIMEOUT,
            op,
            serde_json::json!({"driver": driver, "claims": claims}),
        )
        .await;
    assert_eq!(answer["error"], "", "{op}: {answer}");
    let result = answer["response"]["claims"][uid].clone();
    assert!(
        result["error"].is_null() || result["error"] == "",
        "{op}: {answer}"
    );
    result
}

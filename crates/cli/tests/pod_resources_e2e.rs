//! The pod-resources API as monitoring agents read it: the kubelet's own Go
//! client, a grpcio client from our `.proto` files (with a path-valued
//! `:authority`) and `nodeplugins pod-resources` see each container's
//! devices (with NUMA nodes) and DRA claims (with CDI devices), the same
//! again after an agent restart; the socket is private, rate-limited as the
//! kubelet's, served again with its mode and counted when deleted, and a
//! client that never reads holds up nobody.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::time::Instant;

use nodeplugins_api::podresources::v1;
use nodeplugins_api::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::Command;

const RESOURCE: &str = "example.com/device";
const DRIVER: &str = "dra.example.com";
const CLAIM: &str = "ml/gpus/0c1a-gpus";

fn socket(root: &Path) -> PathBuf {
    root.join("pod-resources/kubelet.sock")
}

fn device_plugin(root: &Path) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command.arg("--root-dir").arg(root);
    ChildProcess::spawn("example-device-plugin", command)
}

fn dra_driver(root: &Path) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    command.arg("--root-dir").arg(root);
    ChildProcess::spawn("example-dra-driver", command)
}

/// `nodeplugins ARGS -o json`, which must succeed.
async fn cli_json(root: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let out = cli(root, &args).await;
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Pod ml/train: two devices for container main, and claim ml/gpus for
/// main and sidecar. Returns (device ids, the claim's device and CDI id).
async fn train_pod(root: &Path) -> (Vec<String>, (String, String)) {
    resource_when(root, RESOURCE, |r| r["allocatable"] == 4).await;
    let allocated = cli_json(
        root,
        &[
            "allocate",
            "--pod",
            "uid-train",
            "--pod-name",
            "train",
            "--namespace",
            "ml",
            "--container",
            "main",
            &format!("{RESOURCE}=2"),
        ],
    )
    .await;
    let devices: Vec<String> = allocated["allocations"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    let args = [
        "dra",
        "prepare",
        "--driver",
        DRIVER,
        "--claim",
        CLAIM,
        "--pod",
        "uid-train",
        "--pod-name",
        "train",
        "--container",
        "main",
        "--container",
        "sidecar",
        "-o",
        "json",
    ];
    let prepared = eventually("the DRA driver registered", TIMEOUT, || async {
        let out = cli(root, &args).await;
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap())
    })
    .await;
    let device = &prepared["claims"][0]["devices"][0];
    let claim = (
        device["device"].as_str().unwrap().to_string(),
        device["cdi_device_ids"][0].as_str().unwrap().to_string(),
    );
    (devices, claim)
}

/// The NUMA node example-device-plugin puts `device` on.
fn numa_of(device: &str) -> i64 {
    device.trim_start_matches("dev-").parse::<i64>().unwrap() % 2
}

/// Checks a `List` answer in the Go client's JSON (protobuf Go types:
/// snake_case names, zero values left out).
fn check_list(list: &Value, devices: &[String], claim: &(String, String)) {
    let pods = list["pod_resources"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{list:#}");
    let pod = &pods[0];
    assert_eq!(
        (pod["namespace"].as_str(), pod["name"].as_str()),
        (Some("ml"), Some("train"))
    );
    let containers = pod["containers"].as_array().unwrap();
    let names: Vec<&str> = containers
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["main", "sidecar"]);
    let main = &containers[0];
    let entries = main["devices"].as_array().unwrap();
    let mut seen: Vec<(String, i64)> = entries
        .iter()
        .map(|d| {
            assert_eq!(d["resource_name"], RESOURCE);
            let ids = d["device_ids"].as_array().unwrap();
            assert_eq!(ids.len(), 1, "one device per entry: {d}");
            let nodes = d["topology"]["nodes"].as_array().unwrap();
            assert_eq!(nodes.len(), 1, "one NUMA node per entry: {d}");
            (
                ids[0].as_str().unwrap().to_string(),
                nodes[0]["ID"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    seen.sort();
    let mut want: Vec<(String, i64)> = devices.iter().map(|d| (d.clone(), numa_of(d))).collect();
    want.sort();
    assert_eq!(seen, want);
    for container in containers {
        let claims = container["dynamic_resources"].as_array().unwrap();
        assert_eq!(claims.len(), 1, "{container}");
        assert_eq!(claims[0]["claim_name"], "gpus");
        assert_eq!(claims[0]["claim_namespace"], "ml");
        let resource = &claims[0]["claim_resources"][0];
        assert_eq!(resource["driver_name"], DRIVER);
        assert_eq!(resource["pool_name"], "node-local");
        assert_eq!(resource["device_name"], claim.0.as_str());
        assert_eq!(resource["cdi_devices"], json!([{"name": claim.1}]));
    }
    assert!(
        containers[1]
            .get("devices")
            .is_none_or(|d| d.is_null() || d.as_array().is_some_and(Vec::is_empty)),
        "{:#}",
        containers[1]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn monitoring_clients_see_each_containers_devices_and_claims_and_again_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let mut agent = agent(root.path());
    let _plugin = device_plugin(root.path());
    let _driver = dra_driver(root.path());
    let (devices, claim) = train_pod(root.path()).await;
    let socket = socket(root.path());

    // Private unless configured otherwise.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);

    // The kubelet's own client.
    let mut go = GoProcess::start(
        "podresources-client",
        ["--socket", socket.to_str().unwrap()],
    );
    go.event(TIMEOUT, "started", |_| true).await;
    let list = go.request(TIMEOUT, "list", json!({})).await;
    assert_eq!(list["error"], "", "{list}");
    check_list(&list["response"], &devices, &claim);
    let got = go
        .request(TIMEOUT, "get", json!({"namespace": "ml", "name": "train"}))
        .await;
    assert_eq!(
        got["response"]["pod_resources"],
        list["response"]["pod_resources"][0]
    );
    let missing = go
        .request(TIMEOUT, "get", json!({"namespace": "ml", "name": "nope"}))
        .await;
    assert_eq!(missing["code"], "Unknown", "{missing}");
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .ends_with("pod nope in namespace ml not found"),
        "{missing}"
    );
    let allocatable = go.request(TIMEOUT, "allocatable", json!({})).await;
    let mut all: Vec<(String, i64)> = allocatable["response"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let id = d["device_ids"][0].as_str().unwrap().to_string();
            (id, d["topology"]["nodes"][0]["ID"].as_i64().unwrap_or(0))
        })
        .collect();
    all.sort();
    let want: Vec<(String, i64)> = (0..4).map(|i| (format!("dev-{i}"), i % 2)).collect();
    assert_eq!(all, want, "every healthy device, allocated or not");
    let alpha = go.request(TIMEOUT, "list_v1alpha1", json!({})).await;
    let alpha_devices = &alpha["response"]["pod_resources"][0]["containers"][0]["devices"];
    assert_eq!(alpha_devices.as_array().unwrap().len(), 2, "{alpha}");

    // grpcio from our .proto files, with a path-valued :authority.
    let out = python_env()
        .script("pod_resources_client.py")
        .arg(&socket)
        .arg("--authority")
        .arg(&socket)
        .args(["--get", "ml/train", "--get", "ml/nope"])
        .output()
        .await
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{}", String::from_utf8_lossy(&out.stderr));
    let py_list = &lines[0]["response"];
    let py_pod = &py_list["pod_resources"][0];
    assert_eq!(
        (&py_pod["namespace"], &py_pod["name"]),
        (&json!("ml"), &json!("train"))
    );
    assert_eq!(
        py_pod["containers"][0]["devices"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        py_pod["containers"][1]["dynamic_resources"][0]["claim_resources"][0]["cdi_devices"],
        json!([{"name": claim.1}])
    );
    assert_eq!(
        lines[1]["response"]["pod_resources"], *py_pod,
        "Get as List"
    );
    assert_eq!(lines[2]["code"], "UNKNOWN");
    assert_eq!(lines[2]["details"], "pod nope in namespace ml not found");
    assert_eq!(lines[3]["response"]["devices"].as_array().unwrap().len(), 4);
    assert_eq!(lines[4]["response"]["pod_resources"][0]["name"], "train");
    assert_eq!(
        metric(
            root.path(),
            r#"kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"}"#
        )
        .await,
        2,
        "each Get of an unknown pod counts, as the kubelet counts it"
    );

    // The command line.
    let printed = cli_json(root.path(), &["pod-resources"]).await;
    check_list(&printed, &devices, &claim);
    let table = cli(root.path(), &["pod-resources"]).await;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("NAMESPACE"), "{table}");
    assert!(table.contains(&claim.1), "{table}");
    let one = cli_json(root.path(), &["pod-resources", "--pod", "ml/train"]).await;
    assert!(one["pod_resources"].is_object(), "Get's shape: {one:#}");
    check_list(
        &json!({"pod_resources": [one["pod_resources"]]}),
        &devices,
        &claim,
    );
    let printed = cli_json(root.path(), &["pod-resources", "--allocatable"]).await;
    assert_eq!(printed["devices"].as_array().unwrap().len(), 4);

    // Restarted: the same answers, from the checkpoints, from the first
    // call on (the server answers once both managers have read theirs).
    signal(&agent, "-TERM").await;
    assert_eq!(agent.wait(TIMEOUT).await, Some(0));
    go.close_stdin();
    agent = common::agent(root.path());
    eventually("the socket served again", TIMEOUT, || async {
        socket.exists().then_some(())
    })
    .await;
    let mut go = GoProcess::start(
        "podresources-client",
        ["--socket", socket.to_str().unwrap()],
    );
    go.event(TIMEOUT, "started", |_| true).await;
    let again = go.request(TIMEOUT, "list", json!({})).await;
    assert_eq!(again["error"], "", "{again}");
    assert_eq!(again["response"], list["response"]);
    let got_again = go
        .request(TIMEOUT, "get", json!({"namespace": "ml", "name": "train"}))
        .await;
    assert_eq!(got_again["error"], "", "{got_again}");
    assert_eq!(got_again["response"], got["response"], "Get as before");
    // Allocatable devices come from the plugin, which registers again.
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 4).await;
    let allocatable_again = go.request(TIMEOUT, "allocatable", json!({})).await;
    assert_eq!(
        allocatable_again["response"], allocatable["response"],
        "GetAllocatableResources as before"
    );
    assert_eq!(allocatable_again["error"], "", "{allocatable_again}");
    drop(agent);
}

async fn metric(root: &Path, name: &str) -> u64 {
    let status = status_json(root).await.unwrap();
    let addr = status["metrics_addr"].as_str().unwrap().to_string();
    let (_, text) = http_get(&addr, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_holds_up_nobody_and_bursts_are_limited_as_by_the_kubelet() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let _plugin = device_plugin(root.path());
    let _driver = dra_driver(root.path());
    let (devices, claim) = train_pod(root.path()).await;
    let socket = socket(root.path());

    // A refused call is answered with headers too (trailers-only): the
    // client below tells it from a started answer, and never calls it stalled.
    let mut command = python_env().script("pod_resources_stall.py");
    command
        .arg(&socket)
        .args(["--calls", "2", "--path", "/v1.PodResourcesLister/Nope"]);
    let mut refused = ChildProcess::spawn_with_stdin("pod_resources_stall.py", command);
    for _ in 0..2 {
        let line = refused
            .wait_for_line(TIMEOUT, |l| l == "STALLED" || l.starts_with("REFUSED"))
            .await;
        // grpc-status 12: Unimplemented.
        assert!(
            line.starts_with("REFUSED") && line.ends_with(" 12"),
            "{line}"
        );
    }
    refused.close_stdin();
    refused.wait(TIMEOUT).await;
    assert!(
        !refused.output().iter().any(|l| l == "STALLED"),
        "{:?}",
        refused.output()
    );

    // Five List calls on a connection that grants no room for an answer:
    // each answer started (headers sent, no grpc-status) and held up.
    let mut command = python_env().script("pod_resources_stall.py");
    command.arg(&socket).args(["--calls", "5"]);
    let mut stalled = ChildProcess::spawn_with_stdin("pod_resources_stall.py", command);
    let line = stalled
        .wait_for_line(TIMEOUT, |l| l == "STALLED" || l.starts_with("REFUSED"))
        .await;
    assert_eq!(line, "STALLED", "{:?}", stalled.output());

    // Meanwhile: other clients are answered, and the agent allocates.
    let printed = cli_json(root.path(), &["pod-resources"]).await;
    check_list(&printed, &devices, &claim);
    let other = cli_json(
        root.path(),
        &[
            "allocate",
            "--pod",
            "uid-other",
            "--container",
            "c",
            &format!("{RESOURCE}=1"),
        ],
    )
    .await;
    assert_eq!(
        other["allocations"][0]["devices"].as_array().unwrap().len(),
        1
    );
    let printed = cli_json(root.path(), &["pod-resources"]).await;
    assert_eq!(printed["pod_resources"].as_array().unwrap().len(), 2);
    assert!(
        !stalled.output().iter().any(|l| l == "GOT_DATA"),
        "{:?}",
        stalled.output()
    );
    stalled.close_stdin();
    stalled.wait(TIMEOUT).await;

    // A burst of 40 calls at once: the bucket (10, refilled at 100 a second)
    // lets few through; the rest are refused at once, as by the kubelet.
    let channel = nodeplugins_api::transport::dial(&socket, TIMEOUT)
        .await
        .unwrap();
    let client = PodResourcesListerClient::new(channel);
    let started = Instant::now();
    let calls = (0..40).map(|_| {
        let mut client = client.clone();
        async move { client.list(v1::ListPodResourcesRequest {}).await }
    });
    let results = futures::future::join_all(calls).await;
    let elapsed = started.elapsed();
    let refused: Vec<&tonic::Status> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let passed = results.len() - refused.len();
    for status in &refused {
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert_eq!(status.message(), "rejected by rate limit");
    }
    let allowed = 10 + (elapsed.as_millis() / 10) as usize + 1;
    assert!(
        !refused.is_empty() && passed <= allowed,
        "{passed} of 40 passed in {elapsed:?}"
    );
    assert_eq!(
        metric(root.path(), "nodeplugins_pod_resources_rate_limited_total").await,
        refused.len() as u64
    );
    // The bucket fills again.
    eventually("a call passes again", TIMEOUT, || {
        let mut client = client.clone();
        async move { client.list(v1::ListPodResourcesRequest {}).await.ok() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_socket_comes_back_private_and_is_counted() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let socket = socket(root.path());
    eventually("the socket served", TIMEOUT, || async {
        socket.exists().then_some(())
    })
    .await;
    let before = cli_json(root.path(), &["pod-resources"]).await;
    assert_eq!(
        metric(
            root.path(),
            "nodeplugins_pod_resources_socket_recreations_total"
        )
        .await,
        0
    );

    // Gone once removed: whatever is at the path afterwards was bound again.
    std::fs::remove_file(&socket).unwrap();
    eventually("the socket served again", TIMEOUT, || async {
        socket.exists().then_some(())
    })
    .await;
    // Answered: the new socket is served, which it is only once its mode is set.
    let after = cli_json(root.path(), &["pod-resources"]).await;
    assert_eq!(after, before, "the same answers on the new socket");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600, "the socket is private again");
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    assert!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert_eq!(
        metric(
            root.path(),
            "nodeplugins_pod_resources_socket_recreations_total"
        )
        .await,
        1
    );
}

//! The pod-resources API as monitoring agents read it: the kubelet's own Go
//! client, a grpcio client from our `.proto` files (with a path-valued
//! `:authority`) and `nodeplugins pod-resources` see each container's
//! devices (with NUMA nodes) and DRA claims (with CDI devices), the same
//! again after an agent restart; the socket is private, rate-limited as the
//! kubelet's, served again with its mode and counted when deleted, and a
//! client that never reads holds up nobody.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod clients;
mod rate_limiting;
mod socket_recreation;

use common::*;

use std::path::{Path, PathBuf};

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
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
        "--pod-uid",
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

async fn metric(root: &Path, name: &str) -> u64 {
    let status = status_json(root).await.unwrap();
    let addr = status["metrics_addr"].as_str().unwrap().to_string();
    let (_, text) = http_get(&addr, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

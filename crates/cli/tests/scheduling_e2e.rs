//! The real kube-scheduler places pods on the device capacity our agent
//! publishes: with 4 healthy `example.com/device` from our SDK's example
//! device plugin, a pod asking for 2 is bound and one asking for 3 is not;
//! once a device turns unhealthy (allocatable 3), a pod asking for 2 more
//! is not either.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::control_plane::ControlPlane;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::Command;

const NODE: &str = "node-1";
const RESOURCE: &str = "example.com/device";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// A pod asking for `count` devices.
async fn pod_asking_for(api: &KubeApi, name: &str, count: u32) {
    let devices = json!({RESOURCE: count.to_string()});
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": "example.invalid/app",
                "resources": {"requests": devices, "limits": devices}}],
        },
    });
    let created = api.request(Identity::Admin, "POST", PODS, Some(&pod)).await;
    assert_eq!(created.status, 201, "create pod {name}: {}", created.body);
}

/// The node's allocatable `RESOURCE`, once it is `want`.
async fn allocatable_when(api: &KubeApi, want: &str) {
    eventually(
        &format!("allocatable {RESOURCE} {want}"),
        TIMEOUT,
        || async {
            let node: Value = api
                .request(
                    Identity::Admin,
                    "GET",
                    &format!("/api/v1/nodes/{NODE}"),
                    None,
                )
                .await
                .body;
            (node["status"]["allocatable"][RESOURCE] == want).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_places_device_plugin_pods_on_the_allocatable_the_agent_publishes() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(NODE).await;
    let _control = ControlPlane::start(&api).await;
    api.create_schedulable_node(NODE).await;
    api.ensure_default_service_account("default").await;
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = api.node_kubeconfig();
    let _agent = agent_with(
        root.path(),
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-name",
            NODE,
        ],
    );
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command
        .arg("--root-dir")
        .arg(root.path())
        .args(["--resource", RESOURCE, "--devices", "4"]);
    let plugin = ChildProcess::spawn("example-device-plugin", command);
    allocatable_when(&api, "4").await;

    pod_asking_for(&api, "two", 2).await;
    assert_eq!(api.wait_pod_bound("default", "two").await, NODE);
    pod_asking_for(&api, "three", 3).await;
    let why = api.wait_pod_unschedulable("default", "three").await;
    assert!(why.contains(&format!("Insufficient {RESOURCE}")), "{why}");

    // One device unhealthy: 3 allocatable, 2 of them taken.
    signal(&plugin, "-USR1").await;
    allocatable_when(&api, "3").await;
    pod_asking_for(&api, "two-more", 2).await;
    let why = api.wait_pod_unschedulable("default", "two-more").await;
    assert!(why.contains(&format!("Insufficient {RESOURCE}")), "{why}");
}

//! The conformance tool's verdicts against the kubelet's own code: a
//! faulty plugin the tool WARNs is one the kubelet copes with (so far
//! `device.options`, `device.allocate.unknown-ids`,
//! `device.allocate.concurrent` and `dra.health.first`). Each test runs
//! `faulty-plugin` with one fault behind the kubelet v1.37.2's own code:
//! device plugins behind `interop/cmd/kubelet-pods` (its device manager,
//! as the real kubelet runs it, behind a pod informer on a real API
//! server), checking that a pod using the plugin is admitted; DRA drivers
//! behind `interop/cmd/kubelet-plugins` (its plugin manager and DRA plugin
//! manager), checking that claims are prepared. The tool's verdict for the
//! same fault is checked in `conformance_e2e` (the fault tables).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::kubelet_claim_call;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::json;
use tokio::process::Command;

const NODE: &str = "node-ref";
/// `faulty-plugin`'s resource and device count.
const RESOURCE: &str = "example.com/faulty";
const DEVICES: &str = "4";

/// The kubelet's device manager serving `NODE`, and `faulty-plugin` with
/// `fault` registered with it, once the kubelet shows its devices.
async fn kubelet_with_faulty_device_plugin(
    api: &KubeApi,
    root: &std::path::Path,
    fault: &str,
) -> (GoProcess, ChildProcess) {
    let kubeconfig = api.kubeconfig_of_node(NODE);
    let mut kubelet = GoProcess::start(
        "kubelet-pods",
        [
            "--root-dir",
            root.to_str().unwrap(),
            "--state-dir",
            root.join("dra-state").to_str().unwrap(),
            "--node-name",
            NODE,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    let mut command = Command::new(binary("nodeplugins-test-support", "faulty-plugin"));
    command
        .arg("device")
        .arg("--kubelet-dir")
        .arg(root.join("device-plugins"))
        .args(["--fault", fault]);
    let plugin = ChildProcess::spawn("faulty-plugin", command);
    kubelet
        .event(TIMEOUT, "node_status", |e| {
            e["allocatable"][RESOURCE] == DEVICES
        })
        .await;
    (kubelet, plugin)
}

/// The API server for `NODE`, schedulable, with the default account.
async fn cluster() -> KubeApi {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(NODE).await;
    api.create_schedulable_node(NODE).await;
    api.ensure_default_service_account("default").await;
    api
}

/// Pod `name` bound to `NODE`, asking for one device of the faulty plugin.
async fn pod_with_one_device(api: &KubeApi, name: &str) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": "example.invalid/app",
                "resources": {"limits": {RESOURCE: "1"}, "requests": {RESOURCE: "1"}}}],
        },
    });
    api.admin("POST", "/api/v1/namespaces/default/pods", Some(&pod))
        .await;
}

/// The kubelet admitted pod `name` with one device of the faulty plugin.
async fn admitted_with_one_device(kubelet: &mut GoProcess, name: &str) {
    let admitted = kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == name)
        .await;
    let devices = &admitted["containers"][0]["devices"][RESOURCE];
    assert_eq!(devices.as_array().map(Vec::len), Some(1), "{admitted}");
}

/// A temporary kubelet root.
fn root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("oracle-")
        .tempdir()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn options_unlike_registers_are_a_warning_the_kubelet_admits_pods_with_them() {
    let api = cluster().await;
    let root = root();
    // Register says no PreStartContainer; GetDevicePluginOptions says one.
    let (mut kubelet, _plugin) =
        kubelet_with_faulty_device_plugin(&api, root.path(), "options-disagree").await;
    pod_with_one_device(&api, "uses-one").await;
    // The kubelet copes: it reads the options from GetDevicePluginOptions
    // alone and admits the pod with its device.
    admitted_with_one_device(&mut kubelet, "uses-one").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn accepting_unknown_ids_is_a_warning_the_kubelet_never_sends_one() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin) =
        kubelet_with_faulty_device_plugin(&api, root.path(), "allocate-any-id").await;
    pod_with_one_device(&api, "uses-one").await;
    admitted_with_one_device(&mut kubelet, "uses-one").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_concurrent_allocates_is_a_warning_the_kubelet_admits_one_pod_at_a_time() {
    let api = cluster().await;
    let root = root();
    // Allocate answers "busy" while another Allocate runs.
    let (mut kubelet, _plugin) =
        kubelet_with_faulty_device_plugin(&api, root.path(), "allocate-one-at-a-time").await;
    let names = ["first", "second", "third", "fourth"];
    for name in names {
        pod_with_one_device(&api, name).await;
    }
    // Bound at once, admitted one after the other: every Allocate answered.
    for name in names {
        admitted_with_one_device(&mut kubelet, name).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_health_stream_silent_at_first_is_a_warning_the_kubelet_prepares_claims_anyway() {
    nodeplugins_test_support::init_tracing();
    let root = root();
    let registry = root.path().join("plugins_registry");
    // The kubelet's plugin manager with its DRA plugin manager, which opens
    // each driver's health stream.
    let mut kubelet = GoProcess::start(
        "kubelet-plugins",
        ["--registry-dir", registry.to_str().unwrap()],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    let mut command = Command::new(binary("nodeplugins-test-support", "faulty-plugin"));
    command
        .arg("dra")
        .arg("--registry-dir")
        .arg(&registry)
        .arg("--plugin-dir")
        .arg(root.path().join("plugins/faulty"))
        .args(["--fault", "no-health-message"]);
    let _plugin = ChildProcess::spawn("faulty-plugin", command);
    let registered = kubelet
        .event(TIMEOUT, "registered", |e| e["name"] == "faulty.example.com")
        .await;
    assert_eq!(registered["error"], "", "{registered}");
    // Its health stream sends nothing; the kubelet prepares claims anyway.
    let result = kubelet_claim_call(
        &mut kubelet,
        "prepare",
        "faulty.example.com",
        "gpu",
        "uid-1",
    )
    .await;
    assert!(result["devices"][0]["device_name"].is_string(), "{result}");
}

//! The oracle runs: the real kubelet v1.37.2 (built by `interop/`) on a
//! real containerd, registered with a real API server, runs a pod that
//! asks for a device of the SDK's example device plugin. What the
//! container sees (the plugin's environment, device nodes and mount, and
//! the edits of the CDI device it named) and the pod's status over its
//! life are what the agent must equal when it runs the same pod.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::containerd::{Containerd, cri_log_lines};
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::real_kubelet::{DEVICE_PLUGINS, RealKubelet};
use nodeplugins_test_support::wait::eventually;
use serde_json::json;
use tokio::process::Command;

const NODE: &str = "kubelet-node";
const RESOURCE: &str = "example.com/device";
const PODS: &str = "/api/v1/namespaces/default/pods";
/// Starting a node and a pod on this machine.
const LONG: std::time::Duration = std::time::Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread")]
async fn the_real_kubelet_runs_a_pod_with_a_device_plugin_device_on_containerd() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(NODE).await;
    api.ensure_default_service_account("default").await;
    let containerd = Containerd::start().await;
    containerd.write_example_cdi_spec(RESOURCE, 2);
    std::fs::create_dir_all("/var/run/example-device").unwrap();
    let kubeconfig = api.kubeconfig_of_node(NODE);
    let kubelet = RealKubelet::start(NODE, &kubeconfig, &containerd).await;
    let mut plugin = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    plugin
        .args([
            "--root-dir",
            "/var/lib/kubelet",
            "--resource",
            RESOURCE,
            "--pre-start",
        ])
        .args(["--devices", "2", "--log-level", "warn"])
        .kill_on_drop(true);
    let _plugin = plugin.spawn().unwrap();
    assert!(Path::new(DEVICE_PLUGINS).exists());

    let node_path = format!("/api/v1/nodes/{NODE}");
    eventually(
        "the kubelet's Node with the plugin's devices",
        LONG,
        || async {
            // The Node does not exist until the kubelet registers it.
            let answer = api.request(Identity::Admin, "GET", &node_path, None).await;
            (answer.status == 200 && answer.body["status"]["allocatable"][RESOURCE] == "2")
                .then_some(())
        },
    )
    .await;

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {
            "nodeName": NODE,
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "env; ls /dev; ls /var/run; echo ready; exec sleep 3600"],
                "env": [{"name": "FROM_POD", "value": "1"}],
                "resources": {"limits": {RESOURCE: "1"}},
            }],
        },
    });
    api.admin("POST", PODS, Some(&pod)).await;
    let running = eventually("the pod Running", LONG, || async {
        let pod = api.admin("GET", &format!("{PODS}/probe"), None).await;
        (pod["status"]["phase"] == "Running").then_some(pod)
    })
    .await;
    let status = &running["status"]["containerStatuses"][0];
    assert_eq!(status["name"], "main", "{running}");
    assert!(
        status["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://"),
        "{status}"
    );
    assert_eq!(status["restartCount"], 0);

    let uid = running["metadata"]["uid"].as_str().unwrap();
    let log = kubelet
        .pod_logs()
        .join(format!("default_probe_{uid}"))
        .join("main/0.log");
    let lines = eventually("the container's output", LONG, || async {
        let lines = cri_log_lines(&log);
        lines.iter().any(|l| l == "ready").then_some(lines)
    })
    .await;
    let device = lines
        .iter()
        .find_map(|l| l.strip_prefix("EXAMPLE_DEVICES="))
        .unwrap_or_else(|| panic!("the plugin's environment in {lines:?}"))
        .to_string();
    for wanted in [
        "FROM_POD=1".to_string(),
        device.clone(),
        format!("EXAMPLE_CDI_{}=on", device.replace('-', "_").to_uppercase()),
        "example-device".to_string(),
    ] {
        assert!(
            lines.contains(&wanted),
            "{wanted} in {lines:?}\n{}",
            kubelet
                .log()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // Deleted with its grace period: the kubelet stops the container and
    // deletes the pod object itself.
    api.admin("DELETE", &format!("{PODS}/probe"), None).await;
    eventually("the pod object gone", LONG, || async {
        let answer = api
            .request(Identity::Admin, "GET", &format!("{PODS}/probe"), None)
            .await;
        (answer.status == 404).then_some(())
    })
    .await;
}

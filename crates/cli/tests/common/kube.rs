//! An agent publishing to a real kube-apiserver, and what the tests read
//! back from it.

use std::path::{Path, PathBuf};

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::Command;

use super::agent_with;

/// The API server for node identity `node`, with the Nodes `nodes`
/// created by the admin.
pub async fn api_with_nodes(node: &str, nodes: &[&str]) -> KubeApi {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(node).await;
    for name in nodes {
        create_node(&api, name).await;
    }
    api
}

/// Creates Node `name` as the admin.
pub async fn create_node(api: &KubeApi, name: &str) {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    api.admin("POST", "/api/v1/nodes", Some(&node)).await;
}

/// The agent on `root`, publishing for `node` with `kubeconfig`.
pub fn publishing_agent_as(
    kubeconfig: &Path,
    node: &str,
    root: &Path,
    extra: &[&str],
) -> ChildProcess {
    let mut args = vec![
        "--kubeconfig",
        kubeconfig.to_str().unwrap_or_default(),
        "--node-name",
        node,
    ];
    args.extend_from_slice(extra);
    agent_with(root, &args)
}

/// Node `node` once `pred` holds for it.
pub async fn node_when(
    api: &KubeApi,
    node: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let what = format!("node {node}: {what}");
    eventually(&what, TIMEOUT, || async {
        let found = api
            .admin("GET", &format!("/api/v1/nodes/{node}"), None)
            .await;
        pred(&found).then_some(found)
    })
    .await
}

/// (capacity, allocatable) of `resource` on `node`, as strings.
pub fn counts<'a>(node: &'a Value, resource: &str) -> (&'a Value, &'a Value) {
    (
        &node["status"]["capacity"][resource],
        &node["status"]["allocatable"][resource],
    )
}

/// Whether `node` shows `resource` with these counts.
pub fn has(node: &Value, resource: &str, capacity: &str, allocatable: &str) -> bool {
    counts(node, resource) == (&json!(capacity), &json!(allocatable))
}

/// `example-device-plugin` on `root` with `devices` devices of `resource`.
pub fn example_device_plugin(root: &Path, resource: &str, devices: usize) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command.arg("--root-dir").arg(root).args([
        "--resource",
        resource,
        "--devices",
        &devices.to_string(),
    ]);
    ChildProcess::spawn("example-device-plugin", command)
}

/// A CSI driver's service socket on `root`.
pub fn csi_socket(root: &Path, driver: &str) -> PathBuf {
    let socket = root.join(format!("plugins/{driver}/csi.sock"));
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    std::fs::create_dir_all(root.join("plugins_registry")).unwrap();
    socket
}

/// `nodeplugins-csi-registrar` for the driver at `socket`.
pub fn csi_registrar(root: &Path, socket: &Path) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"));
    command
        .arg(format!("--csi-address={}", socket.display()))
        .arg(format!("--kubelet-registration-path={}", socket.display()))
        .arg(format!(
            "--plugin-registration-path={}",
            root.join("plugins_registry").display()
        ));
    ChildProcess::spawn("nodeplugins-csi-registrar", command)
}

/// `example-csi-driver` at `socket` as `driver`, with node id `node_id`
/// in zone `zone` (label `topology.<driver>/zone`).
pub fn csi_driver(socket: &Path, driver: &str, node_id: &str, zone: &str) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-csi-driver"));
    command
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg(format!("--node-id={node_id}"))
        .arg(format!("--driver-name={driver}"))
        .args(["--max-volumes", "8", "--zone", zone]);
    ChildProcess::spawn("example-csi-driver", command)
}

/// A ResourceSlice of `node` with one device (`gpu-0`) in a pool named
/// after the node, by driver `driver`.
pub fn slice(name: &str, node: &str, driver: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    })
}

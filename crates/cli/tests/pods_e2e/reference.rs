//! Our agent against the kubelet's own code, container by container: the
//! same pods, placed by the scheduler on our node and on a node served by
//! `interop/cmd/kubelet-pods` (the kubelet's device manager behind its
//! topology manager's admission, and its DRA manager, each node with its
//! own example device plugin and DRA driver), get the same: as many devices
//! per resource, the same topology reported, the same Allocate answers'
//! shape, as many CDI devices from the device plugin and from the claims.
//! Which devices is free where the kubelet's choice is (it takes any free
//! device; ours are NUMA-aligned).

use std::collections::BTreeMap;

use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::json;

use super::common::pods::*;
use super::*;

/// The kubelet's node.
pub(super) const REFERENCE: &str = "node-ref";

/// What must be the same for a container on both nodes.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    name: String,
    /// Resource → device count.
    devices: BTreeMap<String, usize>,
    /// Whether its devices are reported with their NUMA nodes (which ones
    /// may differ: the kubelet without a topology policy takes any free
    /// device, ours are aligned).
    numa_reported: bool,
    env_keys: Vec<String>,
    mounts: usize,
    device_specs: usize,
    annotation_keys: Vec<String>,
    cdi_devices: usize,
    claim_cdi_devices: usize,
}

fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn len(value: &Value) -> usize {
    value.as_array().map_or(0, Vec::len)
}

/// A container of our `nodeplugins pods` row.
fn ours(container: &Value) -> Shape {
    let devices: BTreeMap<String, usize> = container["devices"]
        .as_object()
        .map(|m| m.iter().map(|(r, ids)| (r.clone(), len(ids))).collect())
        .unwrap_or_default();
    Shape {
        name: container["name"].as_str().unwrap().to_string(),
        devices,
        numa_reported: container["numa"].as_object().map_or(0, |m| m.len())
            == container["devices"]
                .as_object()
                .map_or(0, |m| m.values().map(len).sum()),
        env_keys: keys(&container["envs"]),
        mounts: len(&container["mounts"]),
        device_specs: len(&container["device_specs"]),
        annotation_keys: keys(&container["annotations"]),
        cdi_devices: len(&container["cdi_devices"]),
        claim_cdi_devices: len(&container["claim_cdi_devices"]),
    }
}

/// A container of the kubelet's `admitted` event.
fn kubelets(container: &Value) -> Shape {
    let devices: BTreeMap<String, usize> = container["devices"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(r, ids)| (r.clone(), len(ids)))
                .filter(|(_, n)| *n > 0)
                .collect()
        })
        .unwrap_or_default();
    let numa_reported = devices
        .keys()
        .all(|resource| len(&container["numa"][resource]) > 0);
    Shape {
        name: container["name"].as_str().unwrap().to_string(),
        devices,
        numa_reported,
        env_keys: keys(&container["envs"]),
        mounts: len(&container["mounts"]),
        device_specs: len(&container["device_specs"]),
        annotation_keys: keys(&container["annotations"]),
        cdi_devices: len(&container["cdi_devices"]),
        claim_cdi_devices: len(&container["dra_cdi_devices"]),
    }
}

/// The pods both nodes get, for node `node`, named with `suffix`.
fn pods(node: &str, suffix: &str) -> Vec<Value> {
    let sidecar = {
        let mut sidecar = container("proxy", 1, &[]);
        sidecar["restartPolicy"] = json!("Always");
        sidecar
    };
    vec![
        with_claims(
            with_init(
                pod(
                    &format!("train-{suffix}"),
                    node,
                    vec![container("main", 2, &["gpu"]), container("log", 0, &[])],
                ),
                vec![container("setup", 2, &[]), sidecar],
            ),
            vec![from_template("gpu", "gpu")],
        ),
        pod(
            &format!("plain-{suffix}"),
            node,
            vec![container("main", 1, &[])],
        ),
        with_claims(
            pod(
                &format!("two-claims-{suffix}"),
                node,
                vec![
                    container("a", 0, &["one"]),
                    container("b", 0, &["one", "two"]),
                ],
            ),
            vec![from_template("one", "gpu"), from_template("two", "gpu")],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn each_container_gets_what_the_kubelets_own_code_gives_it() {
    let cluster = Cluster::start(&[NODE, REFERENCE]).await;
    cluster.claim_template("gpu").await;
    let node = Node::start(&cluster, NODE, 4, 4).await;

    // The kubelet's node: its own root, plugins and node identity.
    let (root, kubeconfig, mut kubelet) = start_kubelet_pods(&cluster).await;
    let _plugins = reference_plugins(&cluster, root.path(), &kubeconfig).await;
    kubelet
        .event(TIMEOUT, "node_status", |e| {
            e["allocatable"][RESOURCE] == "4"
        })
        .await;

    for pod in pods(NODE, "ours").iter().chain(&pods(REFERENCE, "ref")) {
        cluster.create(pod).await;
    }
    for (ours_name, ref_name) in [
        ("train-ours", "train-ref"),
        ("plain-ours", "plain-ref"),
        ("two-claims-ours", "two-claims-ref"),
    ] {
        let mine = node.pod_when(ours_name, "admitted", admitted).await;
        let theirs = kubelet
            .event(LONG, "admitted", |e| e["name"] == ref_name)
            .await;
        let mine: Vec<Shape> = containers(&mine).iter().map(ours).collect();
        let theirs: Vec<Shape> = theirs["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(kubelets)
            .collect();
        assert_eq!(mine, theirs, "{ours_name} against the kubelet's {ref_name}");
    }

    // Both give everything back when the pods go.
    for suffix in ["ours", "ref"] {
        for name in ["train", "plain", "two-claims"] {
            cluster.delete(&format!("{name}-{suffix}")).await;
        }
    }
    node.pods_when("every pod gone", |pods| pods.is_empty())
        .await;
    assert_eq!(node.held().await, (0, 0));
    for name in ["train-ref", "plain-ref", "two-claims-ref"] {
        kubelet.event(LONG, "released", |e| e["name"] == name).await;
    }
}

/// `kubelet-pods` serving node [`REFERENCE`] of `cluster` on a root of its
/// own, once it runs: (its root, the node's kubeconfig, the process).
pub(super) async fn start_kubelet_pods(
    cluster: &Cluster,
) -> (tempfile::TempDir, std::path::PathBuf, GoProcess) {
    let root = tempfile::Builder::new()
        .prefix("node-ref-")
        .tempdir()
        .unwrap();
    let kubeconfig = cluster.api.kubeconfig_of_node(REFERENCE);
    let mut kubelet = GoProcess::start(
        "kubelet-pods",
        [
            "--root-dir",
            root.path().to_str().unwrap(),
            "--state-dir",
            root.path().join("dra-state").to_str().unwrap(),
            "--node-name",
            REFERENCE,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    (root, kubeconfig, kubelet)
}

/// The example device plugin and DRA driver on the kubelet's node.
async fn reference_plugins(
    cluster: &Cluster,
    root: &std::path::Path,
    kubeconfig: &std::path::Path,
) -> (
    nodeplugins_test_support::process::ChildProcess,
    tokio::process::Child,
) {
    let mut command = tokio::process::Command::new(nodeplugins_test_support::binaries::binary(
        "nodeplugins-sdk-bins",
        "example-device-plugin",
    ));
    command
        .arg("--root-dir")
        .arg(root)
        .args(["--resource", RESOURCE, "--pre-start", "--devices", "4"])
        .args(["--log-level", "warn"]);
    let plugin =
        nodeplugins_test_support::process::ChildProcess::spawn("example-device-plugin", command);
    let mut command = tokio::process::Command::new(nodeplugins_test_support::binaries::binary(
        "nodeplugins-sdk-bins",
        "example-dra-driver",
    ));
    command
        .arg("--root-dir")
        .arg(root)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-name", REFERENCE, "--log-level", "warn"])
        .arg("--cdi-dir")
        .arg(root.join("cdi"))
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    let driver = command.spawn().unwrap();
    nodeplugins_test_support::wait::eventually("the reference node's GPUs", TIMEOUT, || async {
        let path = format!(
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{REFERENCE}"
        );
        let list = cluster.api.admin("GET", &path, None).await;
        (!list["items"].as_array()?.is_empty()).then_some(())
    })
    .await;
    (plugin, driver)
}

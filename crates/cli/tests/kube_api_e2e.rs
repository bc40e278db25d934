//! The agent publishing to a real kube-apiserver (with etcd, the Node
//! authorizer and NodeRestriction) as the node identity, as the kubelet does:
//! device plugin resources in the Node's status, CSI drivers on the Node and
//! its CSINode, the node's ResourceSlices withdrawn at start and after a DRA
//! driver's grace period; and an API server that goes away and comes back.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::kube::*;
use common::*;

use std::path::Path;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::Command;

const NODE: &str = "node-1";
const RESOURCE: &str = "example.com/device";
const STUB_RESOURCE: &str = "example.com/resource";

/// The API server with Nodes `node-1` and `node-2` created by the admin.
async fn api() -> KubeApi {
    api_with_nodes(NODE, &[NODE, "node-2"]).await
}

/// The agent on `root`, publishing as the node identity.
fn publishing_agent(api: &KubeApi, root: &Path, extra: &[&str]) -> ChildProcess {
    publishing_agent_as(&api.node_kubeconfig(), NODE, root, extra)
}

async fn get(api: &KubeApi, path: &str) -> Value {
    api.admin("GET", path, None).await
}

#[tokio::test(flavor = "multi_thread")]
async fn device_resources_follow_their_plugins_in_the_node_status() {
    let api = api().await;
    let root = tempfile::tempdir().unwrap();
    let mut agent = publishing_agent(&api, root.path(), &["--device-grace-period", "2s"]);
    let mut example = example_device_plugin(root.path(), RESOURCE, 2);
    let kubelet_sock = root.path().join("device-plugins/kubelet.sock");
    eventually("kubelet.sock", TIMEOUT, || async {
        kubelet_sock.exists().then_some(())
    })
    .await;
    let mut stub = GoProcess::start(
        "stub-device-plugin",
        [
            "--kubelet-sock",
            kubelet_sock.to_str().unwrap(),
            "--resource",
            STUB_RESOURCE,
            "--devices",
            "Dev-1,Dev-2",
            "--watch",
        ],
    );
    node_when(&api, NODE, "both resources", |n| {
        has(n, RESOURCE, "2", "2") && has(n, STUB_RESOURCE, "2", "2")
    })
    .await;

    // Health flips, from our plugin and from the kubelet's stub.
    signal(&example, "-USR1").await;
    node_when(&api, NODE, "one unhealthy device", |n| {
        has(n, RESOURCE, "2", "1")
    })
    .await;
    let update = json!({"devices": [{"id": "Dev-1", "health": "Unhealthy"}, {"id": "Dev-2", "health": "Unhealthy"}]});
    stub.request(TIMEOUT, "update", update).await;
    node_when(&api, NODE, "the stub's devices unhealthy", |n| {
        has(n, STUB_RESOURCE, "2", "0")
    })
    .await;

    // A plugin gone: allocatable 0 at once, capacity kept; after the grace
    // period the resource reads 0 and is still there.
    example.kill().await;
    node_when(&api, NODE, "disconnected", |n| has(n, RESOURCE, "2", "0")).await;
    node_when(&api, NODE, "removed after the grace period", |n| {
        has(n, RESOURCE, "0", "0")
    })
    .await;

    // The agent restarts: the stub's resource comes back from the checkpoint
    // at 0 until the stub registers again (it polls every 10 s).
    signal(&agent, "-TERM").await;
    agent.wait(TIMEOUT).await;
    let _agent = publishing_agent(&api, root.path(), &["--device-grace-period", "2s"]);
    node_when(
        &api,
        NODE,
        "the checkpoint's resource at 0 until its plugin is back",
        |n| has(n, STUB_RESOURCE, "0", "0"),
    )
    .await;
    node_when(&api, NODE, "the stub back after the restart", |n| {
        has(n, STUB_RESOURCE, "2", "2") && has(n, RESOURCE, "0", "0")
    })
    .await;
    stub.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn csi_drivers_appear_on_the_node_and_its_csinode_and_go_when_deregistered() {
    let api = api().await;
    let root = tempfile::tempdir().unwrap();
    let _agent = publishing_agent(&api, root.path(), &[]);
    let socket = root.path().join("plugins/csi.example.com/csi.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let registry = root.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let registrar = || {
        let mut command = Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"));
        command
            .arg(format!("--csi-address={}", socket.display()))
            .arg(format!("--kubelet-registration-path={}", socket.display()))
            .arg(format!("--plugin-registration-path={}", registry.display()));
        ChildProcess::spawn("nodeplugins-csi-registrar", command)
    };
    let driver = |node_id: &str| {
        let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-csi-driver"));
        command
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!("--node-id={node_id}"))
            .args(["--max-volumes", "8", "--zone", "zone-a"]);
        ChildProcess::spawn("example-csi-driver", command)
    };
    const ZONE: &str = "topology.csi.example.com/zone";
    let mut first = driver("id-1");
    let mut reg = registrar();
    let node = node_when(&api, NODE, "annotation and label", |n| {
        n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
            == r#"{"csi.example.com":"id-1"}"#
    })
    .await;
    assert_eq!(node["metadata"]["labels"][ZONE], "zone-a");
    // The CSINode is written after the Node, as the kubelet writes them.
    let csinode = eventually("the CSINode's driver", TIMEOUT, || async {
        let csinode = get(&api, &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}")).await;
        (!csinode["spec"]["drivers"].is_null()).then_some(csinode)
    })
    .await;
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");
    // The in-tree plugins migrated to CSI, as the kubelet of v1.37 lists them.
    assert_eq!(
        csinode["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"],
        "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
    );
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["name"], NODE);
    assert_eq!(
        csinode["metadata"]["ownerReferences"][0]["uid"],
        node["metadata"]["uid"]
    );
    assert_eq!(
        csinode["spec"]["drivers"],
        json!([{"name": "csi.example.com", "nodeID": "id-1", "topologyKeys": [ZONE], "allocatable": {"count": 8}}])
    );

    // Deregistered: the entry and the annotation go, the label stays.
    signal(&reg, "-TERM").await;
    reg.wait(TIMEOUT).await;
    let node = node_when(&api, NODE, "annotation removed", |n| {
        n["metadata"]["annotations"]
            .get("csi.volume.kubernetes.io/nodeid")
            .is_none()
    })
    .await;
    assert_eq!(node["metadata"]["labels"][ZONE], "zone-a");
    eventually("CSINode entry removed", TIMEOUT, || async {
        let csinode = get(&api, &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}")).await;
        csinode["spec"]["drivers"]
            .as_array()
            .is_none_or(|d| d.is_empty())
            .then_some(())
    })
    .await;

    // Registered again with another node id: the entry is replaced.
    first.kill().await;
    let _second = driver("id-2");
    let _reg = registrar();
    eventually("CSINode entry with the new node id", TIMEOUT, || async {
        let csinode = get(&api, &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}")).await;
        (csinode["spec"]["drivers"][0]["nodeID"] == "id-2").then_some(())
    })
    .await;
    node_when(&api, NODE, "annotation with the new node id", |n| {
        n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
            == r#"{"csi.example.com":"id-2"}"#
    })
    .await;
}

async fn create_slice(api: &KubeApi, name: &str, node: &str, driver: &str) {
    let created = api
        .request(
            Identity::Admin,
            "POST",
            "/apis/resource.k8s.io/v1/resourceslices",
            Some(&slice(name, node, driver)),
        )
        .await;
    assert_eq!(created.status, 201, "create slice {name}: {}", created.body);
}

async fn slice_names(api: &KubeApi) -> Vec<String> {
    let list = get(api, "/apis/resource.k8s.io/v1/resourceslices").await;
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn resource_slices_are_wiped_at_start_and_after_a_drivers_grace_period_only() {
    const DRIVER: &str = "dra.example.com";
    let api = api().await;
    create_slice(&api, "mine-a", NODE, DRIVER).await;
    create_slice(&api, "mine-b", NODE, "other.example.com").await;
    create_slice(&api, "theirs", "node-2", DRIVER).await;
    let root = tempfile::tempdir().unwrap();
    // Long enough for the driver to start again and reconnect on a machine
    // busy running the rest of the suite.
    let _agent = publishing_agent(&api, root.path(), &["--dra-cleanup-grace", "5s"]);
    eventually("the node's slices wiped at start", TIMEOUT, || async {
        (slice_names(&api).await == ["theirs"]).then_some(())
    })
    .await;

    // A driver that returns within its grace period keeps its slices.
    let example = |instance: &str| {
        let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
        command
            .arg("--root-dir")
            .arg(root.path())
            .args(["--instance", instance]);
        ChildProcess::spawn("example-dra-driver", command)
    };
    let mut driver = example("a");
    dra_driver_when(root.path(), DRIVER, |d| {
        d["instances"][0]["connected"] == true
    })
    .await;
    create_slice(&api, "published", NODE, DRIVER).await;
    driver.kill().await;
    let scheduled = dra_driver_when(root.path(), DRIVER, |d| !d["pending_cleanup"].is_null()).await;
    let deadline = scheduled["pending_cleanup"]["deadline_unix_ms"]
        .as_u64()
        .unwrap();
    let mut driver = example("a");
    dra_driver_when(root.path(), DRIVER, |d| {
        d["pending_cleanup"].is_null() && d["instances"][0]["connected"] == true
    })
    .await;
    // The cleanup was cancelled: its deadline passes, nothing is cleaned up
    // and the slice is still there.
    eventually("the cleanup's deadline to pass", TIMEOUT, || async {
        (unix_ms_now() > deadline + 500).then_some(())
    })
    .await;
    let kinds: Vec<String> = dra_event_kinds(root.path(), DRIVER).await;
    assert!(
        kinds.contains(&"cleanup_cancelled".to_string()),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"cleaned_up".to_string()), "{kinds:?}");
    assert_eq!(slice_names(&api).await, ["published", "theirs"]);

    // Away longer than the grace period: its slices go, others' stay.
    driver.kill().await;
    dra_driver_when(root.path(), DRIVER, |d| {
        !d["cleaned_up_at_unix_ms"].is_null()
    })
    .await;
    assert_eq!(slice_names(&api).await, ["theirs"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_away_blocks_nothing_and_gets_the_latest_state_when_back() {
    let mut api = api().await;
    let root = tempfile::tempdir().unwrap();
    // Devices allocated by hand while the API server is away.
    let _agent = publishing_agent(&api, root.path(), &["--pods", "off"]);
    let mut plugin = example_device_plugin(root.path(), RESOURCE, 2);
    node_when(&api, NODE, "resource published", |n| {
        has(n, RESOURCE, "2", "2")
    })
    .await;
    // Everything written first (the CSINode too), so that the backlog is
    // the Node's status alone.
    eventually(
        "nothing pending before the API server goes",
        TIMEOUT,
        || async {
            let status = status_json(root.path()).await?;
            (status["kube_api"]["pending"] == json!([])).then_some(())
        },
    )
    .await;

    api.stop_apiserver().await;
    // Everything on the node still works.
    signal(&plugin, "-USR1").await;
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 1).await;
    let request = nodeplugins::device::AllocationRequest::new("pod", "default", "pod", "main")
        .resource(RESOURCE, 1);
    let reply = tokio::time::timeout(TIMEOUT, nodeplugins::admin::allocate(root.path(), &request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.allocations[0].devices.len(), 1);
    let status = eventually("the backlog in status", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        let api = status["kube_api"].clone();
        (api["pending"] == json!(["node_status"]) && api["last_error"].is_string()).then_some(api)
    })
    .await;
    assert!(status["failures"].as_u64().unwrap() >= 1, "{status}");

    // More changes while it is away; the latest wins once it is back. Each
    // signal's effect is waited for before the next is sent: two pending
    // at once reach the plugin in either order.
    signal(&plugin, "-USR2").await;
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 2).await;
    signal(&plugin, "-USR1").await;
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 1).await;
    api.start_apiserver().await;
    node_when(&api, NODE, "caught up", |n| has(n, RESOURCE, "2", "1")).await;
    let status = eventually("nothing pending", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        let api = status["kube_api"].clone();
        (api["pending"] == json!([])).then_some(api)
    })
    .await;
    assert_eq!(status["last_error"], Value::Null);
    plugin.kill().await;
}

/// Now, in Unix milliseconds.
fn unix_ms_now() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// The kinds of the agent's events about DRA driver `driver`, oldest first.
async fn dra_event_kinds(root: &Path, driver: &str) -> Vec<String> {
    let out = cli(root, &["events", "-o", "json"]).await;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["source"] == "dra" && e["driver"] == driver)
        .filter_map(|e| e["kind"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_lists_its_node_once_for_the_publisher_and_the_pods_both() {
    let api = api().await;
    let root = tempfile::tempdir().unwrap();
    let before = api.request_counts().await;
    let _agent = publishing_agent(&api, root.path(), &[]);
    let mut plugin = example_device_plugin(root.path(), RESOURCE, 2);
    node_when(&api, NODE, "resource published", |n| {
        has(n, RESOURCE, "2", "2")
    })
    .await;
    // The pods' caches are filled once their watches have listed.
    let counts = eventually("the pods and services listed", TIMEOUT, || async {
        let counts = api.request_counts().await.since(&before, &[]);
        let listed = |key: &str| counts.0.get(key).copied().unwrap_or(0.0) >= 1.0;
        (listed("LIST pods") && listed("LIST services")).then_some(counts)
    })
    .await;
    // One listing of the Node: the publisher's watch of it feeds the
    // pods' cache too.
    assert_eq!(counts.0.get("LIST nodes"), Some(&1.0), "{counts:?}");
    plugin.kill().await;
}

/// Ready's status and reason on `node`.
fn ready(node: &Value) -> (String, String) {
    let conditions = node["status"]["conditions"].as_array();
    let ready = conditions.and_then(|all| all.iter().find(|c| c["type"] == "Ready"));
    (
        ready.map_or(String::new(), |c| c["status"].as_str().unwrap_or("").into()),
        ready.map_or(String::new(), |c| c["reason"].as_str().unwrap_or("").into()),
    )
}

/// The keys of `node`'s taints.
fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|t| t["key"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_registers_its_node_and_keeps_it_ready_past_the_grace_period() {
    const REGISTERED: &str = "node-r";
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(REGISTERED).await;
    // The node lifecycle controller with a grace period past one Lease
    // renewal (10 s), so that the Lease alone keeps the node healthy.
    let _control = nodeplugins_test_support::control_plane::ControlPlane::start_with_args(
        &api,
        &["node-lifecycle-controller"],
        &[
            "--node-monitor-grace-period=16s",
            "--node-monitor-period=1s",
        ],
    )
    .await;
    let root = tempfile::tempdir().unwrap();
    let mut agent = publishing_agent_as(
        &api.node_kubeconfig(),
        REGISTERED,
        root.path(),
        &[
            "--register-node",
            "on",
            "--node-ip",
            "127.0.0.1",
            "--node-labels",
            "example.com/pool=a,node.kubernetes.io/role=test",
            "--register-with-taints",
            "example.com/dedicated=x:NoSchedule",
            "--max-pods",
            "50",
        ],
    );

    // Made by the agent, as the kubelet makes its Node, and Ready once the
    // runtime answered (the simulated one is ready with its network).
    let node = eventually("node-r made, Ready and untainted", TIMEOUT, || async {
        let answer = api
            .request(
                Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{REGISTERED}"),
                None,
            )
            .await;
        let n = answer.body;
        (answer.status == 200
            && ready(&n).0 == "True"
            && !taint_keys(&n).contains(&"node.kubernetes.io/not-ready".into()))
        .then_some(n)
    })
    .await;
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], REGISTERED);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["beta.kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"].is_string());
    assert_eq!(labels["example.com/pool"], "a");
    assert_eq!(labels["node.kubernetes.io/role"], "test");
    assert_eq!(
        node["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    assert_eq!(taint_keys(&node), ["example.com/dedicated"]);
    assert_eq!(
        node["status"]["addresses"],
        json!([
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": REGISTERED},
        ])
    );
    let status = &node["status"];
    for key in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert!(
            status["capacity"][key].is_string(),
            "capacity {key}: {status}"
        );
        assert!(
            status["allocatable"][key].is_string(),
            "allocatable {key}: {status}"
        );
    }
    assert_eq!(status["capacity"]["pods"], "50");
    assert_ne!(
        status["capacity"]["memory"],
        status["allocatable"]["memory"]
    );
    let info = &status["nodeInfo"];
    assert_eq!(info["kubeletVersion"], "v1.37.2");
    assert_eq!(info["operatingSystem"], "linux");
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .starts_with("simulated://"),
        "{info}"
    );
    assert!(!info["bootID"].as_str().unwrap().is_empty());
    assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    let kinds: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    );
    assert_eq!(ready(&node).1, "KubeletReady");

    // Well past the grace period (the Lease renewed, the status unchanged
    // and not written): still Ready, never marked unreachable.
    let since = tokio::time::Instant::now();
    while since.elapsed() < std::time::Duration::from_secs(30) {
        let now = get(&api, &format!("/api/v1/nodes/{REGISTERED}")).await;
        assert_eq!(ready(&now).0, "True", "{now}");
        assert!(
            !taint_keys(&now).contains(&"node.kubernetes.io/unreachable".into()),
            "{now}"
        );
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }

    // Stopped past the grace period: Unknown and unreachable; resumed:
    // Ready again within seconds.
    let pid = agent.pid().unwrap().to_string();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    // The last renewal up to 10 s old, then the grace period.
    eventually(
        "node-r Unknown and unreachable",
        std::time::Duration::from_secs(60),
        || async {
            let n = get(&api, &format!("/api/v1/nodes/{REGISTERED}")).await;
            (ready(&n) == ("Unknown".into(), "NodeStatusUnknown".into())
                && taint_keys(&n).contains(&"node.kubernetes.io/unreachable".into()))
            .then_some(())
        },
    )
    .await;
    signal("-CONT");
    node_when(&api, REGISTERED, "Ready again, not unreachable", |n| {
        ready(n).0 == "True" && !taint_keys(n).contains(&"node.kubernetes.io/unreachable".into())
    })
    .await;
    agent.kill().await;
}

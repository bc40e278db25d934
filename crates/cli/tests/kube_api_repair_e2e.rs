//! What the agent wrote to a real kube-apiserver stays right when the API
//! changes under it: a Node deleted and made again, another writer, a CSI
//! driver that left while another collided, a client certificate rotated
//! on disk, credentials of another node, and a minute without the API
//! server, after which the nodes' retries are spread rather than in step.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::kube::*;
use common::*;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::Command;

const NODE: &str = "node-1";
const RESOURCE: &str = "example.com/device";
const NODE_ID: &str = "csi.volume.kubernetes.io/nodeid";

async fn csinode(api: &KubeApi) -> Option<Value> {
    let found = api
        .request(
            nodeplugins_test_support::kube_api::Identity::Admin,
            "GET",
            &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}"),
            None,
        )
        .await;
    (found.status == 200).then_some(found.body)
}

fn driver_names(csinode: &Value) -> BTreeSet<String> {
    csinode["spec"]["drivers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_made_again_gets_its_devices_and_csi_driver_back() {
    let api = api_with_nodes(NODE, &[NODE]).await;
    let root = tempfile::tempdir().unwrap();
    let _agent = publishing_agent_as(&api.node_kubeconfig(), NODE, root.path(), &[]);
    let _plugin = example_device_plugin(root.path(), RESOURCE, 2);
    let socket = csi_socket(root.path(), "csi.example.com");
    let _driver = csi_driver(&socket, "csi.example.com", "id-1", "zone-a");
    let _registrar = csi_registrar(root.path(), &socket);
    let before = node_when(&api, NODE, "devices and driver", |n| {
        has(n, RESOURCE, "2", "2") && n["metadata"]["annotations"][NODE_ID].is_string()
    })
    .await;

    // Deleted and made again, as a node re-registration does: a new UID,
    // none of the agent's keys.
    api.admin("DELETE", &format!("/api/v1/nodes/{NODE}"), None)
        .await;
    eventually("the Node gone", TIMEOUT, || async {
        let found = api
            .request(
                nodeplugins_test_support::kube_api::Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{NODE}"),
                None,
            )
            .await;
        (found.status == 404).then_some(())
    })
    .await;
    create_node(&api, NODE).await;
    let after = node_when(&api, NODE, "devices and driver back", |n| {
        has(n, RESOURCE, "2", "2")
            && n["metadata"]["annotations"][NODE_ID] == r#"{"csi.example.com":"id-1"}"#
    })
    .await;
    assert_ne!(after["metadata"]["uid"], before["metadata"]["uid"]);
    eventually("a CSINode of the new Node", TIMEOUT, || async {
        let found = csinode(&api).await?;
        (found["metadata"]["ownerReferences"][0]["uid"] == after["metadata"]["uid"]
            && driver_names(&found).contains("csi.example.com"))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_writers_allocatable_is_put_right() {
    let api = api_with_nodes(NODE, &[NODE]).await;
    let root = tempfile::tempdir().unwrap();
    let _agent = publishing_agent_as(&api.node_kubeconfig(), NODE, root.path(), &[]);
    let plugin = example_device_plugin(root.path(), RESOURCE, 2);
    node_when(&api, NODE, "devices published", |n| {
        has(n, RESOURCE, "2", "2")
    })
    .await;
    signal(&plugin, "-USR1").await;
    node_when(&api, NODE, "one device unhealthy", |n| {
        has(n, RESOURCE, "2", "1")
    })
    .await;

    // Another writer sets allocatable to capacity, as a kubelet that knows
    // nothing of the device plugin would.
    let patch = json!({"status": {"allocatable": {RESOURCE: "2"}}});
    api.admin(
        "PATCH",
        &format!("/api/v1/nodes/{NODE}/status"),
        Some(&patch),
    )
    .await;
    node_when(&api, NODE, "put right", |n| has(n, RESOURCE, "2", "1")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csi_driver_that_left_while_another_collided_leaves_nothing_behind() {
    let api = api_with_nodes(NODE, &[NODE]).await;
    // Driver b's zone is taken by another value already: it collides.
    let label = json!({"metadata": {"labels": {"topology.b.example.com/zone": "zone-x"}}});
    api.admin("PATCH", &format!("/api/v1/nodes/{NODE}"), Some(&label))
        .await;
    let root = tempfile::tempdir().unwrap();
    let agent = publishing_agent_as(&api.node_kubeconfig(), NODE, root.path(), &[]);
    let socket_a = csi_socket(root.path(), "a.example.com");
    let socket_b = csi_socket(root.path(), "b.example.com");
    let _a = csi_driver(&socket_a, "a.example.com", "id-a", "zone-a");
    let _b = csi_driver(&socket_b, "b.example.com", "id-b", "zone-a");
    let registrar_a = csi_registrar(root.path(), &socket_a);
    let _registrar_b = csi_registrar(root.path(), &socket_b);
    node_when(&api, NODE, "driver a written", |n| {
        n["metadata"]["annotations"][NODE_ID] == r#"{"a.example.com":"id-a"}"#
    })
    .await;
    eventually("the collision reported", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        let error = status["kube_api"]["last_error"].as_str()?.to_string();
        error.contains("topology value collision").then_some(())
    })
    .await;

    // Driver a leaves before any write succeeded whole: all of it goes.
    signal(&registrar_a, "-TERM").await;
    node_when(&api, NODE, "driver a's node id gone", |n| {
        n["metadata"]["annotations"].get(NODE_ID).is_none()
    })
    .await;
    eventually("driver a's CSINode entry gone", TIMEOUT, || async {
        (!driver_names(&csinode(&api).await?).contains("a.example.com")).then_some(())
    })
    .await;

    // An annotation that is not a JSON map is reported, never replaced.
    let broken = json!({"metadata": {"annotations": {NODE_ID: "not json"}}});
    api.admin("PATCH", &format!("/api/v1/nodes/{NODE}"), Some(&broken))
        .await;
    let _again = csi_registrar(root.path(), &socket_a);
    eventually("the annotation reported", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        let error = status["kube_api"]["last_error"].as_str()?.to_string();
        error
            .contains(&format!(
                r#"failed to parse node {NODE}'s "{NODE_ID}" annotation"#
            ))
            .then_some(())
    })
    .await;
    let node = api
        .admin("GET", &format!("/api/v1/nodes/{NODE}"), None)
        .await;
    assert_eq!(node["metadata"]["annotations"][NODE_ID], "not json");
    drop(agent);
}

/// Points the kubelet-style symlink `kubelet-client-current.pem` at
/// `target`, swapped in one rename as the kubelet swaps it.
fn point_current_at(pki: &Path, target: &Path) {
    let updated = pki.join("kubelet-client-current.pem.updated");
    let _ = std::fs::remove_file(&updated);
    std::os::unix::fs::symlink(target, &updated).unwrap();
    std::fs::rename(&updated, pki.join("kubelet-client-current.pem")).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_rotated_on_disk_is_used_once_the_old_one_expired() {
    let api = api_with_nodes(NODE, &[NODE]).await;
    let root = tempfile::tempdir().unwrap();
    let pki = root.path().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    // The plugin is built (if need be) before the short-lived certificate
    // is issued: a build waits for any other suite's cargo to finish.
    let _ =
        nodeplugins_test_support::binaries::binary("nodeplugins-sdk-bins", "example-device-plugin");
    // Long enough for the agent to start and write with it on a loaded
    // machine (other suites run beside this one), short enough to wait out.
    let old = api.issue_node_certificate(
        NODE,
        Duration::from_secs(20),
        &pki.join("kubelet-client-1.pem"),
    );
    point_current_at(&pki, &old.path);
    let kubeconfig = root.path().join("kubelet.kubeconfig");
    api.write_certificate_kubeconfig(&kubeconfig, &pki.join("kubelet-client-current.pem"));
    let _agent = publishing_agent_as(&kubeconfig, NODE, root.path(), &[]);
    let plugin = example_device_plugin(root.path(), RESOURCE, 2);
    node_when(&api, NODE, "devices, with the first certificate", |n| {
        has(n, RESOURCE, "2", "2")
    })
    .await;

    // The kubelet rotates its certificate; then the old one expires.
    let new = api.issue_node_certificate(
        NODE,
        Duration::from_secs(24 * 3600),
        &pki.join("kubelet-client-2.pem"),
    );
    point_current_at(&pki, &new.path);
    let expired = old.not_after + Duration::from_secs(1);
    if let Ok(left) = expired.duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
    signal(&plugin, "-USR1").await;
    node_when(&api, NODE, "written with the new certificate", |n| {
        has(n, RESOURCE, "2", "1")
    })
    .await;
}

/// `nodeplugins run` with `args`, its stderr in `log`.
fn agent_logging_to(root: &Path, log: &Path, args: &[&str]) -> tokio::process::Child {
    Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(["run", "--metrics-addr", "off", "--root-dir"])
        .arg(root)
        .args(simulated_unless_named(args))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn another_nodes_credentials_stop_the_agent_with_one_line() {
    let api = api_with_nodes(NODE, &[NODE, "node-2"]).await;
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("agent.log");
    let kubeconfig = api.node_kubeconfig();
    let mut agent = agent_logging_to(
        root.path(),
        &log,
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-name",
            "node-2",
            "--log-level",
            "error",
        ],
    );
    let status = tokio::time::timeout(TIMEOUT, agent.wait())
        .await
        .expect("the agent stops")
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "error: the API credentials are node node-1's (system:node:node-1), not node node-2's: every write would be refused; use node node-2's credentials, or --node-name node-1",
        "{text}"
    );
}

/// The delays of the failed writes an agent logged (debug lines of its
/// write state), in order.
/// How many retries each node makes while the API server is away.
const RETRIES_AWAY: usize = 20;

fn retry_delays(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "Kubernetes API write failed")
        .filter_map(|l| l["fields"]["retry_in_ms"].as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_resume_soon_after_the_api_server_was_away_for_many_retries_and_are_not_in_step() {
    let nodes = ["node-1", "node-2", "node-3"];
    let mut api = api_with_nodes(NODE, &nodes).await;
    let kubeconfig = api.admin_kubeconfig();
    let mut running = Vec::new();
    for node in nodes {
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("agent.log");
        let agent = agent_logging_to(
            root.path(),
            &log,
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--node-name",
                node,
                "--log-format",
                "json",
                "--log-level",
                "nodeplugins::kube_api=debug,warn",
            ],
        );
        let plugin = example_device_plugin(root.path(), RESOURCE, 2);
        running.push((node, root, log, agent, plugin));
    }
    for (node, ..) in &running {
        node_when(&api, node, "devices", |n| has(n, RESOURCE, "2", "2")).await;
    }

    // The API server away, while every node has a change, until every node
    // has retried long enough to reach the longest backoff (0.1 s doubling
    // to 2 s: the sixth retry) and kept at it.
    api.stop_apiserver().await;
    for (_, _, _, _, plugin) in &running {
        signal(plugin, "-USR1").await;
    }
    eventually(
        "20 retries on every node",
        Duration::from_secs(120),
        || async {
            running
                .iter()
                .all(|(_, _, log, ..)| retry_delays(log).len() >= RETRIES_AWAY)
                .then_some(())
        },
    )
    .await;
    api.start_apiserver().await;
    for (node, ..) in &running {
        node_when(&api, node, "the change, soon after the return", |n| {
            has(n, RESOURCE, "2", "1")
        })
        .await;
    }
    let delays: Vec<Vec<u64>> = running
        .iter()
        .map(|(_, _, log, ..)| retry_delays(log))
        .collect();
    for (delays, (node, ..)) in delays.iter().zip(&running) {
        assert!(delays.len() >= RETRIES_AWAY, "{node} retried: {delays:?}");
        // At most the longest backoff with its jitter apart.
        assert!(delays.iter().all(|d| *d <= 2400), "{node}: {delays:?}");
    }
    assert!(
        delays[0] != delays[1] && delays[1] != delays[2] && delays[0] != delays[2],
        "the nodes retried in step: {delays:?}"
    );
}

#[test]
fn the_node_name_is_node_name_in_a_pod_else_the_host_name() {
    let print = |node_name: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
        command
            .args(["run", "--print-config"])
            .env_remove("NODEPLUGINS_NODE_NAME");
        match node_name {
            Some(name) => command.env("NODE_NAME", name),
            None => command.env_remove("NODE_NAME"),
        };
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(print(Some("Pod-Node-7")).contains("node_name = \"pod-node-7\""));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_lowercase();
    assert!(print(None).contains(&format!("node_name = \"{host}\"")));
}

//! Container probes, against the oracle: the real kubelet v1.37.2 and our
//! agent, each on its own containerd, registered as two nodes of one API
//! server, run the same pods:
//!
//! - a readiness probe (exec) that fails until the container made a file:
//!   running, started and not ready first (`ContainersNotReady`,
//!   "containers with unready status: [app]"), then ready;
//! - a liveness probe (exec) that fails once the container removed its
//!   file: the container is killed and restarted (`Killing`, "Container
//!   app failed liveness probe, will be restarted"), its last state the
//!   kill's exit;
//! - a startup probe (httpGet) on a server that comes up late, with a
//!   readiness probe (tcpSocket) on the same port: not started (and not
//!   ready) until the server answers, then both.
//!
//! Compared on both nodes: the container's state while the probe fails
//! and once it passed (ready, started, restart count, last state, the
//! pod's conditions), and the Events the probes caused (type, reason,
//! message, field path), the nodes' addresses and ports made alike.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::real_kubelet::RealKubelet;
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;

const KUBELET_NODE: &str = "kubelet-node";
const OUR_NODE: &str = "agent-node";
/// Long enough for a first image unpack and a liveness kill.
const LONG: Duration = Duration::from_secs(120);

/// A pod `name` on `node` of one busybox container `app` running
/// `script`, with `probes` (the container's probe fields).
fn probed_pod(node: &str, name: &str, script: &str, probes: Value) -> Value {
    let mut app = json!({
        "name": "app",
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    });
    for (field, probe) in probes.as_object().unwrap() {
        app[field] = probe.clone();
    }
    common::pods::bound_pod(node, name, vec![app])
}

/// What of a pod's status the probes decide: its container's ready,
/// started, restart count and last state's reason and exit code, and its
/// conditions' (type, status, reason, message).
fn shape(pod: &Value) -> Value {
    let c = &pod["status"]["containerStatuses"][0];
    let terminated = &c["lastState"]["terminated"];
    let mut conditions: Vec<Value> = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!([c["type"], c["status"], c["reason"], c["message"]]))
        .collect();
    conditions.sort_by_key(|c| c[0].as_str().unwrap_or_default().to_string());
    json!({
        "phase": pod["status"]["phase"],
        "ready": c["ready"],
        "started": c["started"],
        "running": c["state"]["running"].is_object(),
        "restartCount": c["restartCount"],
        "lastState": [terminated["reason"], terminated["exitCode"]],
        "conditions": conditions,
    })
}

fn container(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

async fn pod_when(
    api: &KubeApi,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    eventually(&format!("{ns}/{name} {what}"), LONG, || async {
        let pod = api.admin("GET", &path, None).await;
        pred(&pod).then_some(pod)
    })
    .await
}

/// The Events of pod `name` in `ns` the probes caused: (type, reason,
/// message, field path), with `replace`'s pairs replaced in messages.
async fn probe_events(
    api: &KubeApi,
    ns: &str,
    name: &str,
    replace: &[(String, &str)],
) -> BTreeSet<(String, String, String, String)> {
    let path = format!("/api/v1/namespaces/{ns}/events");
    let events = api.admin("GET", &path, None).await;
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == name)
        .filter(|e| {
            ["Unhealthy", "ProbeWarning", "Killing"].contains(&e["reason"].as_str().unwrap_or(""))
        })
        .map(|e| {
            let mut message = e["message"].as_str().unwrap_or_default().to_string();
            for (from, to) in replace {
                message = message.replace(from.as_str(), to);
            }
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
                message,
                e["involvedObject"]["fieldPath"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

async fn namespace(api: &KubeApi, name: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.admin("POST", "/api/v1/namespaces", Some(&ns)).await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let path = format!("/api/v1/namespaces/{name}/serviceaccounts");
    let _ = api.request(Identity::Admin, "POST", &path, Some(&sa)).await;
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The node's address, as its Node says.
async fn node_ip(api: &KubeApi, node: &str) -> String {
    let path = format!("/api/v1/nodes/{node}");
    eventually(&format!("{node}'s address"), LONG, || async {
        let node = api.request(Identity::Admin, "GET", &path, None).await.body;
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == "InternalIP")
            .and_then(|a| a["address"].as_str().map(str::to_string))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_probes_on_our_agent_decide_what_the_real_kubelets_decide() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(OUR_NODE).await;
    let kubelet_containerd = Containerd::start().await;
    let kubelet_config = api.kubeconfig_of_node(KUBELET_NODE);
    let kubelet = RealKubelet::start(KUBELET_NODE, &kubelet_config, &kubelet_containerd).await;
    let our_containerd = Containerd::start().await;
    let root = TempDir::new().unwrap();
    let endpoint = our_containerd.endpoint();
    let _agent = common::kube::publishing_agent_as(
        &api.node_kubeconfig(),
        OUR_NODE,
        root.path(),
        &[
            "--register-node",
            "on",
            "--container-runtime-endpoint",
            &endpoint,
        ],
    );
    let nodes = [("theirs", KUBELET_NODE), ("ours", OUR_NODE)];
    let mut differences = Vec::new();
    let mut normalize = Vec::new();
    let mut ports = Vec::new();
    for (ns, node) in nodes {
        namespace(&api, ns).await;
        let port = free_port();
        normalize.push(vec![
            (node_ip(&api, node).await, "{ip}"),
            (port.to_string(), "{port}"),
        ]);
        ports.push(port);
    }

    let pods = |node: &str, port: u16| {
        [
            probed_pod(
                node,
                "readiness",
                "sleep 4; touch /tmp/ready; exec sleep 3600",
                json!({"readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}}),
            ),
            probed_pod(
                node,
                "liveness",
                "touch /tmp/alive; sleep 3; rm /tmp/alive; exec sleep 3600",
                json!({"livenessProbe": {"exec": {"command": ["cat", "/tmp/alive"]},
                "periodSeconds": 1, "failureThreshold": 1, "terminationGracePeriodSeconds": 1}}),
            ),
            probed_pod(
                node,
                "startup",
                &format!(
                    "sleep 4; mkdir -p /www; echo ok > /www/index.html; exec httpd -f -p {port} -h /www"
                ),
                json!({
                    "startupProbe": {"httpGet": {"port": port, "path": "/index.html"},
                        "periodSeconds": 1, "failureThreshold": 60},
                    "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
                }),
            ),
        ]
    };

    // Each pod made on both nodes when it is watched: while its probe
    // fails, and once it passed (or killed).
    type Pred = fn(&Value) -> bool;
    let cases: [(&str, &str, Pred, &str, Pred); 3] = [
        (
            "readiness",
            "running, not ready",
            |p| container(p)["state"]["running"].is_object() && container(p)["ready"] == false,
            "ready",
            |p| container(p)["ready"] == true,
        ),
        (
            "liveness",
            "running, not restarted",
            |p| container(p)["state"]["running"].is_object() && container(p)["restartCount"] == 0,
            "restarted, running",
            |p| container(p)["restartCount"] == 1 && container(p)["state"]["running"].is_object(),
        ),
        (
            "startup",
            "running, not started",
            |p| container(p)["state"]["running"].is_object() && container(p)["started"] == false,
            "started and ready",
            |p| container(p)["started"] == true && container(p)["ready"] == true,
        ),
    ];
    for (i, (name, before, failing, after, passed)) in cases.into_iter().enumerate() {
        for (n, (ns, node)) in nodes.iter().enumerate() {
            let pod = pods(node, ports[n])[i].clone();
            let path = format!("/api/v1/namespaces/{ns}/pods");
            api.admin("POST", &path, Some(&pod)).await;
        }
        for (what, pred) in [(before, failing), (after, passed)] {
            let mut shapes = Vec::new();
            for (ns, _) in nodes {
                shapes.push(shape(&pod_when(&api, ns, name, what, pred).await));
            }
            if shapes[0] != shapes[1] {
                differences.push(format!(
                    "{name} {what}:\n  kubelet: {}\n  ours:    {}",
                    shapes[0], shapes[1]
                ));
            }
        }
        // Events are recorded in the background: the same ones a little
        // later are the same.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let events = loop {
            let mut events = Vec::new();
            for (i, (ns, _)) in nodes.iter().enumerate() {
                events.push(probe_events(&api, ns, name, &normalize[i]).await);
            }
            if events[0] == events[1] || tokio::time::Instant::now() >= deadline {
                break events;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if events[0] != events[1] {
            differences.push(format!(
                "{name}'s Events:\n  kubelet: {:#?}\n  ours:    {:#?}",
                events[0], events[1]
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} differences:\n{}\n(the kubelet's log: {})",
        differences.len(),
        differences.join("\n"),
        kubelet
            .log()
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

//! Graceful node shutdown on our agent and on the real kubelet, side by
//! side against one real kube-apiserver, each node with its own
//! containerd, both on one system bus (a real dbus-daemon) whose logind is
//! the test's stand-in: both take the same delay lock; when logind says
//! the node shuts down, both Nodes say so in their Ready condition alike,
//! both stop their ordinary pod first and their critical pod after it, each
//! pod left `Failed` with the same reason, message and `DisruptionTarget`
//! condition; both release their locks; a pod bound then is refused alike;
//! when the shutdown is cancelled neither says so any more and both ask
//! for the lock again (ours keeps it; the kubelet may close its own).
//!
//! The real kubelet takes a machine-wide lock, so this runs one at a time
//! with the other tests that start it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::pods::LONG;
use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::logind::{InhibitCall, Logind, SystemBus};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::real_kubelet::RealKubelet;
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::Command;

const KUBELET_NODE: &str = "kubelet-node";
const OUR_NODE: &str = "agent-node";
/// The whole shutdown, and the part of it for critical pods.
const GRACE: &str = "6s";
const CRITICAL_GRACE: &str = "3s";

/// A host-network pod `name` bound to `node`, whose process ignores
/// SIGTERM (PID 1 with no handler): it is killed when its grace runs out.
fn pod_on(node: &str, name: &str, priority_class: Option<&str>) -> Value {
    let app = json!({
        "name": "app",
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "3600"],
    });
    let mut pod = common::pods::bound_pod(node, name, vec![app]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
    if let Some(class) = priority_class {
        pod["spec"]["priorityClassName"] = json!(class);
    }
    pod
}

/// Our agent on `root` for node `OUR_NODE`, on `bus`.
fn our_agent(api: &KubeApi, root: &Path, containerd: &Containerd, bus: &SystemBus) -> ChildProcess {
    let logs = root.join("pod-logs");
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--root-dir"])
        .arg(root)
        .arg("--kubeconfig")
        .arg(api.node_kubeconfig())
        .args(["--node-name", OUR_NODE, "--register-node", "on"])
        .args(["--container-runtime-endpoint", &containerd.endpoint()])
        .arg("--pod-logs-dir")
        .arg(logs)
        .args(["--shutdown-grace-period", GRACE])
        .args(["--shutdown-grace-period-critical-pods", CRITICAL_GRACE])
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus.address())
        .env("RUST_LOG", "info");
    ChildProcess::spawn("nodeplugins run", command)
}

async fn pod_when(api: &KubeApi, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/api/v1/namespaces/default/pods/{name}");
    eventually(&format!("pod {name} {what}"), LONG, || async {
        let pod = api.admin("GET", &path, None).await;
        pred(&pod).then_some(pod)
    })
    .await
}

async fn node_ready_when(
    api: &KubeApi,
    node: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    eventually(&format!("node {node} {what}"), LONG, || async {
        let found = api
            .request(
                Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{node}"),
                None,
            )
            .await;
        if found.status != 200 {
            return None;
        }
        let ready = found.body["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        pred(&ready).then_some(ready)
    })
    .await
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && pod["status"]["containerStatuses"][0]["ready"] == true
}

fn condition<'a>(pod: &'a Value, kind: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// What of a pod stopped by the shutdown is the same on every node.
fn stopped_shape(pod: &Value) -> Value {
    let disruption = condition(pod, "DisruptionTarget");
    let ready = condition(pod, "Ready");
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    json!({
        "phase": pod["status"]["phase"],
        "reason": pod["status"]["reason"],
        "message": pod["status"]["message"],
        "disruption": {
            "status": disruption["status"], "reason": disruption["reason"],
            "message": disruption["message"],
        },
        "ready": {"status": ready["status"], "reason": ready["reason"]},
        "terminated": {"exitCode": terminated["exitCode"], "reason": terminated["reason"]},
    })
}

fn finished_at(pod: &Value) -> String {
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The Events on Node `node` with `reason`.
async fn node_events(api: &KubeApi, node: &str, reason: &str) -> Vec<Value> {
    let events = api
        .admin(
            "GET",
            &format!("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={node},reason={reason}"),
            None,
        )
        .await;
    events["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_shutdown_stops_the_pods_on_our_agent_as_the_real_kubelet_does() {
    nodeplugins_test_support::init_tracing();
    let bus = SystemBus::start().await;
    let logind = Logind::serve(&bus, Duration::from_secs(30)).await;
    let api = KubeApi::start(OUR_NODE).await;
    api.ensure_default_service_account("default").await;
    let kubelet_containerd = Containerd::start().await;
    let kubelet = RealKubelet::start_configured_with_env(
        KUBELET_NODE,
        &api.kubeconfig_of_node(KUBELET_NODE),
        &kubelet_containerd,
        &format!(
            "shutdownGracePeriod: {GRACE}\nshutdownGracePeriodCriticalPods: {CRITICAL_GRACE}\n"
        ),
        &[("DBUS_SYSTEM_BUS_ADDRESS", bus.address())],
    )
    .await;
    let our_containerd = Containerd::start().await;
    let root = TempDir::new().unwrap();
    let agent = our_agent(&api, root.path(), &our_containerd, &bus);
    let nodes = [OUR_NODE, KUBELET_NODE];
    // Neither runtime has a pod network (no CNI): neither node is ready,
    // and both run host-network pods.
    let shutting = |c: &Value| {
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("node is shutting down"))
    };
    for node in nodes {
        node_ready_when(&api, node, "registered", |c| !shutting(c)).await;
    }

    // Both hold the kubelet's lock.
    let lock = InhibitCall {
        what: "shutdown".into(),
        who: "kubelet".into(),
        why: "Kubelet needs time to handle node shutdown".into(),
        mode: "delay".into(),
    };
    eventually("both locks held", LONG, || async {
        (logind.held().len() == 2).then_some(())
    })
    .await;
    assert_eq!(logind.calls(), vec![lock.clone(), lock.clone()]);

    // An ordinary pod and a critical one on each node.
    for node in nodes {
        for (name, class) in [("app", None), ("critical", Some("system-node-critical"))] {
            let pod = pod_on(node, &format!("{name}-{node}"), class);
            api.admin("POST", "/api/v1/namespaces/default/pods", Some(&pod))
                .await;
        }
    }
    for node in nodes {
        for name in ["app", "critical"] {
            pod_when(&api, &format!("{name}-{node}"), "running", running).await;
        }
    }

    // The node shuts down.
    logind.prepare_for_shutdown(true).await;
    let mut not_ready = Vec::new();
    for node in nodes {
        let ready = node_ready_when(&api, node, "shutting down", shutting).await;
        not_ready.push(json!({
            "status": ready["status"], "reason": ready["reason"], "message": ready["message"],
        }));
    }
    assert_eq!(not_ready[0], not_ready[1]);
    assert_eq!(not_ready[0]["reason"], "KubeletNotReady");

    let mut shapes = Vec::new();
    for node in nodes {
        let app = pod_when(&api, &format!("app-{node}"), "stopped", |p| {
            p["status"]["phase"] == "Failed"
        })
        .await;
        let critical = pod_when(&api, &format!("critical-{node}"), "stopped", |p| {
            p["status"]["phase"] == "Failed"
        })
        .await;
        assert!(
            finished_at(&app) <= finished_at(&critical),
            "{node}: the ordinary pod stops before the critical one: {app} {critical}"
        );
        shapes.push((stopped_shape(&app), stopped_shape(&critical)));
    }
    assert_eq!(
        serde_json::to_string_pretty(&shapes[0]).unwrap(),
        serde_json::to_string_pretty(&shapes[1]).unwrap()
    );
    assert_eq!(shapes[0].0["reason"], "Terminated");
    assert_eq!(shapes[0].0["disruption"]["reason"], "TerminationByKubelet");

    // Both let the node go down.
    eventually("both locks released", LONG, || async {
        logind.held().is_empty().then_some(())
    })
    .await;
    let mut said = Vec::new();
    for node in nodes {
        let event = eventually(&format!("{node}'s Shutdown Event"), LONG, || async {
            node_events(&api, node, "Shutdown").await.into_iter().next()
        })
        .await;
        let involved = serde_json::to_string(&event["involvedObject"])
            .unwrap()
            .replace(node, "NODE");
        said.push(
            json!({"type": event["type"], "message": event["message"], "involved": involved}),
        );
    }
    assert_eq!(said[0], said[1]);
    assert_eq!(
        said[0]["message"],
        "Shutdown manager detected shutdown event"
    );

    // A pod bound now is refused alike.
    let mut refused = Vec::new();
    for node in nodes {
        let name = format!("late-{node}");
        api.admin(
            "POST",
            "/api/v1/namespaces/default/pods",
            Some(&pod_on(node, &name, None)),
        )
        .await;
        let pod = pod_when(&api, &name, "refused", |p| p["status"]["phase"] == "Failed").await;
        refused
            .push(json!({"reason": pod["status"]["reason"], "message": pod["status"]["message"]}));
    }
    assert_eq!(refused[0], refused[1]);
    assert_eq!(refused[0]["reason"], "NodeShutdown");

    // The shutdown is cancelled: ready again, the lock taken again.
    logind.prepare_for_shutdown(false).await;
    for node in nodes {
        node_ready_when(&api, node, "no longer shutting down", |c| !shutting(c)).await;
    }
    // Our agent holds the lock again. The kubelet asks for one too, but
    // closes it at once when the new lock's descriptor has the number of
    // the one it released after the shutdown (it closes the number it
    // kept): that is not followed.
    let agent_pid = agent.pid().unwrap();
    eventually("our agent's lock held again", LONG, || async {
        (logind.locks_of(agent_pid) == (2, 1)).then_some(())
    })
    .await;
    let kubelet_pid = kubelet.pid().unwrap();
    eventually("the kubelet's lock asked for again", LONG, || async {
        (logind.locks_of(kubelet_pid).0 == 2).then_some(())
    })
    .await;
    tracing::info!(
        kubelet = ?logind.locks_of(kubelet_pid),
        ours = ?logind.locks_of(agent_pid),
        "locks (asked for, held) after the cancellation"
    );
}

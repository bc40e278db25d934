//! Container lifecycle hooks, against the oracle: the real kubelet v1.37.2
//! and our agent, each on its own containerd, registered as two nodes of
//! one API server, run the same pods:
//!
//! - a `postStart` exec hook that makes the file the readiness probe
//!   reads: the container becomes ready only because the hook ran;
//! - a `postStart` httpGet hook on a port nothing listens on, in a pod
//!   that never restarts: the container is killed (`FailedPostStartHook`
//!   Warning "PostStartHook failed", then `Killing` "FailedPostStartHook")
//!   and the pod fails with the kill's exit;
//! - a `preStop` exec hook that signals the container, which exits 7 on
//!   that signal, killed by its liveness probe: its last state is exit 7,
//!   which only the hook, run before the stop's SIGTERM, can give it (the
//!   shell ignores SIGTERM as PID 1, and SIGKILL is 137);
//! - a `preStop` exec hook that fails, in a pod deleted: `Killing`
//!   "Stopping container app" and `FailedPreStopHook` "PreStopHook
//!   failed", and the pod gone.
//!
//! Compared on both nodes: the pod's and container's state (ready, started,
//! restart count, last state, terminated state, conditions) and the Events
//! the hooks caused (type, reason, message, field path).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::two_nodes::{LONG, TwoNodes, container, one_container_pod, shape};
use nodeplugins_test_support::kube_api::Identity;
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};

/// The Events hooks cause.
const REASONS: [&str; 3] = ["FailedPostStartHook", "FailedPreStopHook", "Killing"];

fn pods(node: &str, port: u16) -> [Value; 4] {
    let mut fails = one_container_pod(
        node,
        "post-start-fails",
        "exec sleep 3600",
        json!({"lifecycle": {"postStart": {"httpGet": {"port": port, "path": "/started"}}}}),
    );
    fails["spec"]["restartPolicy"] = json!("Never");
    let mut pre_stop = one_container_pod(
        node,
        "pre-stop",
        "trap 'exit 7' USR1; \
         if [ ! -e /data/killed ]; then touch /data/killed /tmp/alive; sleep 3; rm /tmp/alive; \
         else touch /tmp/alive; fi; \
         while true; do sleep 1; done",
        json!({
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "livenessProbe": {"exec": {"command": ["cat", "/tmp/alive"]},
                "periodSeconds": 1, "failureThreshold": 1},
            "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "kill -USR1 1"]}}},
        }),
    );
    pre_stop["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    pre_stop["spec"]["terminationGracePeriodSeconds"] = json!(10);
    [
        one_container_pod(
            node,
            "post-start",
            "exec sleep 3600",
            json!({
                "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "echo ran > /tmp/hook"]}}},
                "readinessProbe": {"exec": {"command": ["cat", "/tmp/hook"]}, "periodSeconds": 1},
            }),
        ),
        fails,
        pre_stop,
        one_container_pod(
            node,
            "pre-stop-fails",
            "exec sleep 3600",
            json!({"lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "exit 1"]}}}}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_hooks_on_our_agent_run_as_the_real_kubelets_run_them() {
    let two = TwoNodes::start().await;
    let mut differences = Vec::new();
    type Pred = fn(&Value) -> bool;
    let cases: [(&str, &str, Pred); 4] = [
        ("post-start", "ready", |p| container(p)["ready"] == true),
        ("post-start-fails", "failed", |p| {
            p["status"]["phase"] == "Failed" && container(p)["state"]["terminated"].is_object()
        }),
        ("pre-stop", "restarted, running", |p| {
            container(p)["restartCount"] == 1 && container(p)["state"]["running"].is_object()
        }),
        ("pre-stop-fails", "running", |p| {
            container(p)["state"]["running"].is_object()
        }),
    ];
    for (i, (name, what, pred)) in cases.into_iter().enumerate() {
        for (n, (ns, node)) in two.nodes.iter().enumerate() {
            two.create(ns, &pods(node, two.ports[n])[i]).await;
        }
        let mut shapes = Vec::new();
        for (ns, _) in two.nodes {
            shapes.push(shape(&two.pod_when(ns, name, what, pred).await));
        }
        let shapes: [Value; 2] = shapes.try_into().unwrap();
        TwoNodes::compare(&mut differences, &format!("{name} {what}"), shapes);
        if name == "pre-stop-fails" {
            for (ns, _) in two.nodes {
                let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
                two.api.admin("DELETE", &path, None).await;
            }
            for (ns, _) in two.nodes {
                let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
                eventually(&format!("{ns}/{name} gone"), LONG, || async {
                    let answer = two.api.request(Identity::Admin, "GET", &path, None).await;
                    (answer.status == 404).then_some(())
                })
                .await;
            }
        }
        let events = two.events(name, &REASONS).await;
        TwoNodes::compare(&mut differences, &format!("{name}'s Events"), events);
    }
    two.assert_alike(&differences);
}

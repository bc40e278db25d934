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

use common::two_nodes::{TwoNodes, container, one_container_pod, shape};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_probes_on_our_agent_decide_what_the_real_kubelets_decide() {
    let two = TwoNodes::start().await;
    let mut differences = Vec::new();
    let pods = |node: &str, port: u16| {
        [
            one_container_pod(
                node,
                "readiness",
                "sleep 4; touch /tmp/ready; exec sleep 3600",
                json!({"readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}}),
            ),
            one_container_pod(
                node,
                "liveness",
                "touch /tmp/alive; sleep 3; rm /tmp/alive; exec sleep 3600",
                json!({"livenessProbe": {"exec": {"command": ["cat", "/tmp/alive"]},
                "periodSeconds": 1, "failureThreshold": 1, "terminationGracePeriodSeconds": 1}}),
            ),
            one_container_pod(
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
        for (n, (ns, node)) in two.nodes.iter().enumerate() {
            two.create(ns, &pods(node, two.ports[n])[i]).await;
        }
        for (what, pred) in [(before, failing), (after, passed)] {
            let mut shapes = Vec::new();
            for (ns, _) in two.nodes {
                shapes.push(shape(&two.pod_when(ns, name, what, pred).await));
            }
            let shapes: [Value; 2] = shapes.try_into().unwrap();
            TwoNodes::compare(&mut differences, &format!("{name} {what}"), shapes);
        }
        let events = two
            .events(name, &["Unhealthy", "ProbeWarning", "Killing"])
            .await;
        TwoNodes::compare(&mut differences, &format!("{name}'s Events"), events);
    }
    two.assert_alike(&differences);
}

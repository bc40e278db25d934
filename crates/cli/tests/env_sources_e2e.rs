//! A container's environment from its sources, against the oracle: the
//! real kubelet v1.37.2 and our agent, each on its own containerd,
//! registered as two nodes of one API server, run the same pod. Its
//! variables come from a ConfigMap (`envFrom` with a prefix, and a key),
//! a Secret's key, an optional key of a ConfigMap that does not exist, a
//! resource request and a label; the container exits 3 unless every one
//! holds what it should. Neither object exists at first:
//!
//! - the container waits with `CreateContainerConfigError`, `configmap
//!   "settings" not found` (the `envFrom` source is read first);
//! - once the ConfigMap is made, `secret "db" not found`;
//! - once the Secret is made, it runs and is ready, never restarted.
//!
//! Compared on both nodes: the container's waiting reason and message at
//! each step, its state at the end, and the Warning `Failed` Events
//! ("Error: ...").

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::two_nodes::{TwoNodes, container, one_container_pod, shape};
use serde_json::{Value, json};

/// The container's check of its environment.
const SCRIPT: &str = "[ \"$CFG_mode\" = fast ] && [ \"$MODE\" = fast ] && [ \"$PASSWORD\" = s3cret ] \
    && [ -z \"${ABSENT+set}\" ] && [ \"$CPU\" = 250 ] && [ \"$APP\" = web ] \
    && exec sleep 3600; env; exit 3";

fn pod(node: &str) -> Value {
    let mut pod = one_container_pod(
        node,
        "env",
        SCRIPT,
        json!({
            "resources": {"requests": {"cpu": "250m"}},
            // Ready only if it stays up: one that exits 3 never is.
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
            "env": [
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "ABSENT", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "x", "optional": true}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            ],
        }),
    );
    pod["metadata"]["labels"] = json!({"app": "web"});
    pod
}

fn waiting(pod: &Value) -> Value {
    let w = &container(pod)["state"]["waiting"];
    json!([w["reason"], w["message"]])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_containers_environment_sources_on_our_agent_are_the_real_kubelets() {
    let two = TwoNodes::start().await;
    let mut differences = Vec::new();
    for (ns, node) in two.nodes {
        two.create(ns, &pod(node)).await;
    }
    let objects = [
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                "data": {"mode": "fast"}}),
        ),
        (
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                "stringData": {"password": "s3cret"}}),
        ),
    ];
    for (step, missing) in ["configmap \"settings\"", "secret \"db\""]
        .into_iter()
        .enumerate()
    {
        let mut states = Vec::new();
        for (ns, _) in two.nodes {
            let pod = two
                .pod_when(ns, "env", &format!("waiting for {missing}"), |p| {
                    container(p)["state"]["waiting"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(missing))
                })
                .await;
            states.push(waiting(&pod));
        }
        let states: [Value; 2] = states.try_into().unwrap();
        TwoNodes::compare(&mut differences, &format!("waiting for {missing}"), states);
        let (collection, object) = &objects[step];
        for (ns, _) in two.nodes {
            let path = format!("/api/v1/namespaces/{ns}/{collection}");
            two.api.admin("POST", &path, Some(object)).await;
        }
    }
    let mut shapes = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "env", "running and ready", |p| {
                container(p)["state"]["running"].is_object() && container(p)["ready"] == true
            })
            .await;
        shapes.push(shape(&pod));
    }
    let shapes: [Value; 2] = shapes.try_into().unwrap();
    TwoNodes::compare(&mut differences, "running", shapes);
    let events = two.events("env", &["Failed"]).await;
    TwoNodes::compare(&mut differences, "Events", events);
    two.assert_alike(&differences);
}

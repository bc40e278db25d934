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
//! A second pod's init container writes an environment file into an
//! `emptyDir`, which its app container's `fileKeyRef` variables read (one
//! over two lines, one optional and absent); a third's names a key its
//! file lacks, and waits with the kubelet's message.
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

/// A pod whose init container writes `FILE` into an `emptyDir` and whose
/// app container reads key `key` (and an absent optional one) from it.
fn env_file_pod(node: &str, name: &str, key: &str) -> Value {
    const FILE: &str = "# written by setup\nTOKEN='abc def'\nLINES='one\ntwo' # two lines\n";
    let from_file = |name: &str, key: &str, optional: bool| {
        json!({"name": name, "valueFrom": {"fileKeyRef": {
            "volumeName": "data", "path": "env", "key": key, "optional": optional}}})
    };
    let mut pod = one_container_pod(
        node,
        name,
        "printf '%s|%s|%s' \"$TOKEN\" \"$LINES\" \"${ABSENT-unset}\" > /dev/termination-log",
        json!({
            "env": [from_file("TOKEN", key, false), from_file("LINES", "LINES", false),
                from_file("ABSENT", "ABSENT", true)],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }),
    );
    pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    pod["spec"]["restartPolicy"] = json!("Never");
    pod["spec"]["initContainers"] = json!([{
        "name": "setup",
        "image": nodeplugins_test_support::oci_image::BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", format!("printf \"{FILE}\" > /data/env")],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }]);
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
        two.create(ns, &env_file_pod(node, "env-file", "TOKEN"))
            .await;
        two.create(ns, &env_file_pod(node, "env-file-lacks", "NOPE"))
            .await;
    }
    // Variables from a file an init container wrote, as the container
    // printed them.
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "env-file", "ended", |p| {
                matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            })
            .await;
        seen.push(json!([
            shape(&pod),
            container(&pod)["state"]["terminated"]["message"]
        ]));
    }
    assert_eq!(
        seen[0][1], "abc def|one\ntwo|unset",
        "the kubelet's variables"
    );
    TwoNodes::compare(
        &mut differences,
        "env-file",
        [seen[0].clone(), seen[1].clone()],
    );
    // A key the file lacks: the path in the message is each node's own.
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "env-file-lacks", "waiting", |p| {
                container(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
            })
            .await;
        let message = container(&pod)["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let common = match (message.find(" in file \""), message.find(uid)) {
            (Some(at), Some(from)) => format!(
                "{}{{root}}/pods/{{uid}}{}",
                &message[..at + 10],
                &message[from + uid.len()..]
            ),
            _ => message.clone(),
        };
        seen.push(json!(common));
    }
    assert_eq!(
        seen[0],
        "environment variable key \"NOPE\" not found in file \"{root}/pods/{uid}/volumes/kubernetes.io~empty-dir/data/env\"",
        "the kubelet's message"
    );
    TwoNodes::compare(
        &mut differences,
        "env-file-lacks",
        [seen[0].clone(), seen[1].clone()],
    );
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

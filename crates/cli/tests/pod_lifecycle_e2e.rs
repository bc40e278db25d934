//! What a pod lives through, against the oracle: the real kubelet v1.37.2
//! and our agent, each on its own containerd, registered as two nodes of
//! one API server, run the same pods:
//!
//! - a sidecar that crashes after the pod initialized, and again: the pod
//!   stays Running and Initialized while it waits out its back-off, its
//!   app container shown running, never restarted;
//! - a container that prints `$(POD_IP)` and `$(HOST_IP)` at its first
//!   start: both are the node's address already;
//! - a deleted pod whose container exits 0 on SIGTERM: its last status
//!   before it is gone is terminal (`Succeeded`), as the kubelet writes
//!   it before the final delete (a Job's controller reads it);
//! - a `Never` pod whose app container exits 0 while its sidecar runs: the
//!   sidecar is stopped, and the first terminal status shows it stopped;
//! - a pod with a readiness gate: not Ready, in the kubelet's words, until
//!   the gate's condition is written True, then Ready;
//! - a pod whose RuntimeClass names the runtime's `runc` handler runs, one
//!   whose RuntimeClass names a handler the runtime lacks gets no sandbox
//!   and the kubelet's Event;
//! - a deleted pod's HTTPS `preStop` hook, answered in plain HTTP: asked
//!   again over HTTP, where it succeeds;
//! - a `Never` pod whose running container's image is changed: the
//!   container is killed ("definition changed") and made again from the
//!   new image, its restart count one, the pod Running;
//! - a Job whose pod succeeds, and one whose pods fail past its
//!   `backoffLimit` (the job controller of a real kube-controller-manager
//!   reads what each node writes): the Jobs' conditions and counts, and
//!   their pods' phases and exit codes;
//! - a deleted pod whose container stops answering its readiness probe
//!   on SIGTERM and goes on for a while: shown not ready while it still
//!   runs;
//! - a `Never` pod whose container's `restartPolicyRules` restart it on
//!   exit code 42: it exits 42, is restarted, exits 0 and the pod
//!   succeeds, its restart count one;
//! - a Deployment of two pods with readiness and liveness probes, rolled
//!   out to a new image: its conditions and counts once the rollout is
//!   done, and its pods all ready on the new image.
//!
//! Compared on both nodes: phases, conditions, and the containers' states.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::two_nodes::{LONG, TwoNodes, container, one_container_pod, shape, without_ids};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use nodeplugins_test_support::control_plane::ControlPlane;
use nodeplugins_test_support::kube_api::Identity;
use nodeplugins_test_support::oci_image::{BUSYBOX, PAUSE};
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};

/// The condition a readiness gate waits for.
const GATE: &str = "example.com/gate";

/// Runs until SIGTERM, then exits 0.
const UNTIL_TERM: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// A Job of one pod on `node` whose container runs `script`, retried once.
fn job(node: &str, name: &str, script: &str) -> Value {
    let pod = common::pods::bound_pod(node, name, vec![busybox("app", script)]);
    let mut spec = pod["spec"].clone();
    spec["restartPolicy"] = json!("Never");
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 1, "template": {"spec": spec}},
    })
}

/// A Deployment of two pods on `node`, probed, of `image`.
fn deployment(node: &str, image: &str) -> Value {
    let mut app = busybox("app", "sleep 3600");
    app["image"] = json!(image);
    app["readinessProbe"] = json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
    app["livenessProbe"] = json!({"exec": {"command": ["true"]}, "periodSeconds": 2});
    let pod = common::pods::bound_pod(node, "web", vec![app]);
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod["spec"]},
        },
    })
}

/// Deployment `web` of `ns` once its rollout of `image` is done: its
/// conditions (type, status, reason), counts, and its pods' images and
/// readiness.
async fn rolled_out(two: &TwoNodes, ns: &str, image: &str) -> Value {
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/web");
    let pods_path = format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dweb");
    eventually(&format!("{ns}/web rolled out"), LONG, || async {
        let d = two.api.admin("GET", &path, None).await;
        let status = &d["status"];
        let done = status["observedGeneration"] == d["metadata"]["generation"]
            && status["updatedReplicas"] == 2
            && status["readyReplicas"] == 2
            && status["availableReplicas"] == 2
            && status["replicas"] == 2;
        if !done {
            return None;
        }
        let pods = two.api.admin("GET", &pods_path, None).await;
        let mut shown: Vec<Value> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                json!([
                    p["spec"]["containers"][0]["image"],
                    container(p)["ready"],
                    p["status"]["phase"]
                ])
            })
            .collect();
        shown.sort_by_key(|s| s.to_string());
        let settled = shown.len() == 2 && shown.iter().all(|s| s[0] == image && s[1] == true);
        if !settled {
            return None;
        }
        let mut conditions: Vec<Value> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["type"], c["status"], c["reason"]]))
            .collect();
        conditions.sort_by_key(|c| c.to_string());
        Some(json!({"conditions": conditions, "pods": shown}))
    })
    .await
}

/// What Job `name` of `ns` ended as, once it did: its conditions (type,
/// status, reason), counts, and its pods' phases and exit codes.
async fn job_end(two: &TwoNodes, ns: &str, name: &str) -> Value {
    let path = format!("/apis/batch/v1/namespaces/{ns}/jobs/{name}");
    let job = eventually(&format!("{ns}/{name} ended"), LONG, || async {
        let job = two.api.admin("GET", &path, None).await;
        let ended = job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                matches!(c["type"].as_str(), Some("Complete" | "Failed")) && c["status"] == "True"
            });
        ended.then_some(job)
    })
    .await;
    let mut conditions: Vec<Value> = job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!([c["type"], c["status"], c["reason"]]))
        .collect();
    conditions.sort_by_key(|c| c.to_string());
    let pods = two
        .api
        .admin(
            "GET",
            &format!("/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3D{name}"),
            None,
        )
        .await;
    let mut ends: Vec<Value> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            json!([
                p["status"]["phase"],
                container(p)["state"]["terminated"]["exitCode"],
            ])
        })
        .collect();
    ends.sort_by_key(|e| e.to_string());
    json!({
        "conditions": conditions,
        "succeeded": job["status"]["succeeded"],
        "failed": job["status"]["failed"],
        "pods": ends,
    })
}

fn busybox(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    })
}

/// The status of container `name` among the pod's init or app
/// containers.
fn status_of<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["initContainerStatuses"]
        .as_array()
        .into_iter()
        .chain(pod["status"]["containerStatuses"].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or(&Value::Null)
}

fn condition(pod: &Value, kind: &str) -> Value {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"].clone())
        .unwrap_or(Value::Null)
}

/// The pod's `Ready` condition: status, reason, message.
fn ready(pod: &Value) -> Value {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| json!([c["status"], c["reason"], c["message"]]))
        .unwrap_or(Value::Null)
}

/// A container's state in words both nodes share: which state, its
/// reason and exit code.
fn state(status: &Value) -> Value {
    let state = &status["state"];
    match state.as_object().and_then(|s| s.keys().next()) {
        Some(kind) => json!([kind, state[kind]["reason"], state[kind]["exitCode"]]),
        None => Value::Null,
    }
}

/// A pod answering plain HTTP on `port`, whose `preStop` hook asks it
/// over HTTPS.
fn plain_server(node: &str, ip: &str, port: u16) -> Value {
    // Answers whatever a connection's first read brings (a TLS handshake
    // too) in plain HTTP.
    let answer = r#"dd bs=65536 count=1 >/dev/null 2>&1; printf "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n""#;
    let script = format!("exec nc -ll -p {port} -e sh -c '{answer}'");
    let get = |scheme: &str| json!({"scheme": scheme, "port": port, "path": "/index.html"});
    // The host named: the kubelet finds no pod address of a host-network
    // sandbox for a hook.
    let mut https = get("HTTPS");
    https["host"] = json!(ip);
    let mut pod = one_container_pod(
        node,
        "fallback",
        &script,
        json!({
            "readinessProbe": {"httpGet": get("HTTP"), "periodSeconds": 1},
            "lifecycle": {"preStop": {"httpGet": https}},
        }),
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(5);
    pod
}

fn sidecar_pod(node: &str, name: &str, sidecar: &str, app: &str) -> Value {
    let mut pod = one_container_pod(node, name, app, json!({}));
    let mut proxy = busybox("proxy", sidecar);
    proxy["restartPolicy"] = json!("Always");
    pod["spec"]["initContainers"] = json!([proxy]);
    pod
}

#[tokio::test(flavor = "multi_thread")]
async fn what_pods_live_through_on_our_agent_is_what_they_live_through_on_the_real_kubelet() {
    let two = TwoNodes::start().await;
    let _control = ControlPlane::start_with(
        &two.api,
        &[
            "job-controller",
            "deployment-controller",
            "replicaset-controller",
        ],
    )
    .await;
    let mut differences = Vec::new();
    for (class, handler) in [("plain", "runc"), ("elsewhere", "absent-handler")] {
        let class = json!({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": class}, "handler": handler,
        });
        two.api
            .admin("POST", "/apis/node.k8s.io/v1/runtimeclasses", Some(&class))
            .await;
    }
    for (i, (ns, node)) in two.nodes.into_iter().enumerate() {
        let ip = &two.normalize[i][0].0;
        two.create(ns, &plain_server(node, ip, two.ports[i])).await;
        for (name, class) in [("classed", "plain"), ("unclassed", "elsewhere")] {
            let mut pod = one_container_pod(node, name, "sleep 3600", json!({}));
            pod["spec"]["runtimeClassName"] = json!(class);
            two.create(ns, &pod).await;
        }
        two.create(
            ns,
            &sidecar_pod(node, "sidecar-crash", "sleep 3; exit 1", "sleep 3600"),
        )
        .await;
        let mut addresses = one_container_pod(
            node,
            "addresses",
            "printf '%s %s' \"$POD_IP\" \"$HOST_IP\" > /dev/termination-log",
            json!({"env": [
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            ]}),
        );
        addresses["spec"]["restartPolicy"] = json!("Never");
        two.create(ns, &addresses).await;
        let mut deleted = one_container_pod(node, "deleted", UNTIL_TERM, json!({}));
        deleted["spec"]["terminationGracePeriodSeconds"] = json!(20);
        two.create(ns, &deleted).await;
        let mut ends = sidecar_pod(node, "sidecar-ends", UNTIL_TERM, "sleep 1");
        ends["spec"]["restartPolicy"] = json!("Never");
        ends["spec"]["terminationGracePeriodSeconds"] = json!(20);
        two.create(ns, &ends).await;
        let mut ruled = one_container_pod(
            node,
            "restart-rules",
            "[ -f /data/ran ] && exit 0; touch /data/ran; exit 42",
            json!({
                "restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }),
        );
        ruled["spec"]["restartPolicy"] = json!("Never");
        ruled["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        two.create(ns, &ruled).await;
        let mut draining = one_container_pod(
            node,
            "draining",
            "touch /tmp/ready; trap 'rm /tmp/ready; sleep 10; exit 0' TERM; while true; do sleep 0.2; done",
            json!({"readinessProbe": {
                "exec": {"command": ["test", "-f", "/tmp/ready"]},
                "periodSeconds": 1, "failureThreshold": 1,
            }}),
        );
        draining["spec"]["terminationGracePeriodSeconds"] = json!(30);
        two.create(ns, &draining).await;
        let mut new_image = one_container_pod(node, "new-image", "sleep 3600", json!({}));
        new_image["spec"]["restartPolicy"] = json!("Never");
        new_image["spec"]["terminationGracePeriodSeconds"] = json!(2);
        two.create(ns, &new_image).await;
        let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
        two.api
            .admin("POST", &path, Some(&deployment(node, BUSYBOX)))
            .await;
        for (name, script) in [("job-ok", "exit 0"), ("job-fails", "exit 1")] {
            let path = format!("/apis/batch/v1/namespaces/{ns}/jobs");
            two.api
                .admin("POST", &path, Some(&job(node, name, script)))
                .await;
        }
        let mut gated = one_container_pod(node, "gated", "sleep 3600", json!({}));
        gated["spec"]["readinessGates"] = json!([{"conditionType": GATE}]);
        two.create(ns, &gated).await;
    }

    // The address variables at the first start.
    let mut seen = Vec::new();
    for (i, (ns, _)) in two.nodes.iter().enumerate() {
        let pod = two
            .pod_when(ns, "addresses", "terminated", |p| {
                container(p)["state"]["terminated"].is_object()
            })
            .await;
        let mut message = container(&pod)["state"]["terminated"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for (from, to) in &two.normalize[i] {
            message = message.replace(from.as_str(), to);
        }
        seen.push(message);
    }
    assert_eq!(seen[0], "{ip} {ip}", "the kubelet's variables");
    TwoNodes::compare(
        &mut differences,
        "addresses",
        [seen[0].clone(), seen[1].clone()],
    );

    // The sidecar that crashed twice, in its back-off.
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "sidecar-crash", "its sidecar in back-off", |p| {
                status_of(p, "proxy")["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            })
            .await;
        let app = status_of(&pod, "app");
        seen.push(json!({
            "phase": pod["status"]["phase"],
            "initialized": condition(&pod, "Initialized"),
            "app": state(app),
            "app restarts": app["restartCount"],
            "app has its container": app["containerID"].as_str().is_some_and(|id| !id.is_empty()),
        }));
    }
    TwoNodes::compare(
        &mut differences,
        "sidecar-crash",
        [seen[0].clone(), seen[1].clone()],
    );

    // The app container that ended while its sidecar ran.
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "sidecar-ends", "terminal", |p| {
                matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            })
            .await;
        seen.push(json!({
            "phase": pod["status"]["phase"],
            "proxy": state(status_of(&pod, "proxy")),
            "app": state(status_of(&pod, "app")),
        }));
    }
    assert_eq!(seen[0]["phase"], "Succeeded", "the kubelet's phase");
    TwoNodes::compare(
        &mut differences,
        "sidecar-ends",
        [seen[0].clone(), seen[1].clone()],
    );

    // The readiness gate: Ready held back until its condition is True.
    let client = two.api.client(Identity::Admin).await;
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "gated", "its containers ready", |p| {
                condition(p, "ContainersReady") == "True"
            })
            .await;
        seen.push(ready(&pod));
    }
    assert_eq!(seen[0][0], "False", "the kubelet's Ready");
    TwoNodes::compare(
        &mut differences,
        "gated",
        [seen[0].clone(), seen[1].clone()],
    );
    for (ns, _) in two.nodes {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let open = json!({"status": {"conditions": [{"type": GATE, "status": "True"}]}});
        pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(&open))
            .await
            .unwrap();
    }
    for (ns, _) in two.nodes {
        two.pod_when(ns, "gated", "ready once its gate is open", |p| {
            condition(p, "Ready") == "True"
        })
        .await;
    }

    // The RuntimeClasses: one that names the runtime's handler runs, one
    // that names a handler the runtime does not have holds the pod's
    // sandbox.
    for (ns, _) in two.nodes {
        two.pod_when(ns, "classed", "running", |p| {
            p["status"]["phase"] == "Running"
        })
        .await;
    }
    let held = two
        .events("unclassed", &["FailedCreatePodSandBox"])
        .await
        .map(|events| {
            events
                .into_iter()
                .map(|mut e| {
                    e[2] = without_ids(&e[2]);
                    e
                })
                .collect::<std::collections::BTreeSet<_>>()
        });
    assert!(!held[0].is_empty(), "the kubelet's Event");
    TwoNodes::compare(&mut differences, "unclassed", held);

    // The HTTPS preStop hook a plain HTTP server answers, asked again
    // over HTTP.
    for (ns, _) in two.nodes {
        two.pod_when(ns, "fallback", "ready", |p| condition(p, "Ready") == "True")
            .await;
        let path = format!("/api/v1/namespaces/{ns}/pods/fallback");
        two.api.admin("DELETE", &path, None).await;
    }
    // The hook succeeds on both: no FailedPreStopHook, as there would be
    // without the fall back. (The kubelet's LifecycleHTTPFallback Event,
    // which its hook runner records, did not reach the API in this
    // setting; ours does.)
    let stopped = two
        .events("fallback", &["Killing", "FailedPreStopHook"])
        .await;
    assert!(!stopped[0].is_empty(), "the kubelet's Killing Event");
    TwoNodes::compare(&mut differences, "fallback", stopped);

    // The container that stops answering its readiness probe while it
    // drains: not ready before it is gone.
    for (ns, _) in two.nodes {
        two.pod_when(ns, "draining", "ready", |p| condition(p, "Ready") == "True")
            .await;
        let path = format!("/api/v1/namespaces/{ns}/pods/draining");
        two.api.admin("DELETE", &path, None).await;
    }
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "draining", "not ready while it drains", |p| {
                container(p)["state"]["running"].is_object() && container(p)["ready"] == false
            })
            .await;
        seen.push(json!({
            "phase": pod["status"]["phase"],
            "ready": ready(&pod),
            "containers ready": condition(&pod, "ContainersReady"),
        }));
    }
    TwoNodes::compare(
        &mut differences,
        "draining",
        [seen[0].clone(), seen[1].clone()],
    );

    // The container its rule restarted once.
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "restart-rules", "terminal", |p| {
                matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            })
            .await;
        seen.push(shape(&pod));
    }
    assert_eq!(seen[0]["restartCount"], 1, "the kubelet restarted it once");
    TwoNodes::compare(
        &mut differences,
        "restart-rules",
        [seen[0].clone(), seen[1].clone()],
    );

    // The image changed on a running container: made again from it.
    for (ns, _) in two.nodes {
        two.pod_when(ns, "new-image", "running", |p| {
            container(p)["state"]["running"].is_object()
        })
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let image = json!({"spec": {"containers": [{"name": "app", "image": PAUSE}]}});
        pods.patch(
            "new-image",
            &PatchParams::default(),
            &Patch::Strategic(&image),
        )
        .await
        .unwrap();
    }
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "new-image", "running its new image", |p| {
                container(p)["restartCount"] == 1 && container(p)["state"]["running"].is_object()
            })
            .await;
        seen.push(shape(&pod));
    }
    assert_eq!(seen[0]["phase"], "Running", "the kubelet's phase");
    TwoNodes::compare(
        &mut differences,
        "new-image",
        [seen[0].clone(), seen[1].clone()],
    );
    let killed = two.events("new-image", &["Killing"]).await;
    assert!(!killed[0].is_empty(), "the kubelet's Killing Event");
    TwoNodes::compare(&mut differences, "new-image events", killed);

    // The Deployment, available, then rolled out to a new image.
    for (ns, _) in two.nodes {
        rolled_out(&two, ns, BUSYBOX).await;
        let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": PAUSE}]}}}});
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), ns);
        deployments
            .patch("web", &PatchParams::default(), &Patch::Strategic(&image))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        seen.push(rolled_out(&two, ns, PAUSE).await);
    }
    TwoNodes::compare(&mut differences, "web", [seen[0].clone(), seen[1].clone()]);

    // The Jobs, as their controller saw them end.
    for name in ["job-ok", "job-fails"] {
        let mut seen = Vec::new();
        for (ns, _) in two.nodes {
            seen.push(job_end(&two, ns, name).await);
        }
        TwoNodes::compare(&mut differences, name, [seen[0].clone(), seen[1].clone()]);
    }

    // The deleted pod's last status.
    let mut seen = Vec::new();
    for (ns, _) in two.nodes {
        two.pod_when(ns, "deleted", "running", |p| {
            container(p)["state"]["running"].is_object()
        })
        .await;
        seen.push(last_status_when_deleted(&client, ns, "deleted").await);
    }
    assert_eq!(seen[0]["phase"], "Succeeded", "the kubelet's last status");
    TwoNodes::compare(
        &mut differences,
        "deleted",
        [seen[0].clone(), seen[1].clone()],
    );

    two.assert_alike(&differences);
}

/// Deletes pod `name` of `ns` and returns what its last status showed
/// when it was gone: its phase and its container's state.
async fn last_status_when_deleted(client: &kube::Client, ns: &str, name: &str) -> Value {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let version = pods
        .get(name)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(LONG.as_secs() as u32);
    let mut events = pods.watch(&params, &version).await.unwrap().boxed();
    pods.delete(name, &Default::default()).await.unwrap();
    let gone = tokio::time::timeout(LONG + Duration::from_secs(5), async {
        while let Some(event) = events.next().await {
            if let WatchEvent::Deleted(pod) = event.unwrap() {
                return pod;
            }
        }
        panic!("{ns}/{name}: the watch ended before the pod was gone");
    })
    .await
    .unwrap_or_else(|_| panic!("{ns}/{name} not gone"));
    let pod = serde_json::to_value(&gone).unwrap();
    json!({
        "phase": pod["status"]["phase"],
        "app": state(container(&pod)),
    })
}

//! Pods' security contexts, against the oracle: the real kubelet v1.37.2
//! and our agent, each on its own containerd, registered as two nodes of
//! one API server, run the same pods. Each container writes what it sees
//! of itself into its termination log and exits 0, so its status's
//! termination message carries it:
//!
//! - `confined`: a pod user, group, fsGroup and supplemental group, a
//!   safe sysctl, seccomp `RuntimeDefault`; the container without
//!   privilege escalation, with a read-only root filesystem, every
//!   capability dropped but one;
//! - `privileged`: a privileged container (every capability, `/proc`
//!   unmasked and writable);
//! - `plain`: nothing asked (the runtime's default capabilities, no
//!   seccomp filter, masked paths);
//! - `host-pid`: the node's PIDs and IPC.
//!
//! What each sees: `id`, its capability sets, `NoNewPrivs` and `Seccomp`
//! from `/proc/self/status`, whether its root filesystem is writable, the
//! sysctl, whether `/proc/keys` is masked and `/proc/sys` read-only, the
//! name of PID 1. And two pods the node refuses:
//!
//! - `non-root`: `runAsNonRoot` with an image that runs as root, held with
//!   `CreateContainerConfigError` and the kubelet's message;
//! - `bad-sysctl`: an unsafe sysctl, refused at admission
//!   (`SysctlForbidden`).
//!
//! Compared on both nodes: the termination messages, the containers'
//! `user` status, the held container's reason and message, the refused
//! pod's phase, reason and message, and their Warning Events.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::two_nodes::{TwoNodes, container, normalized, one_container_pod};
use serde_json::{Value, json};

/// What a container sees of itself, written to its termination log.
const SEE: &str = "{ id; \
    grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status; \
    touch /written 2>/dev/null && echo rootfs=rw || echo rootfs=ro; \
    echo shm_rmid_forced=$(cat /proc/sys/kernel/shm_rmid_forced); \
    echo keys=$(ls -l /proc/keys | cut -c1); \
    echo procsys=$(awk '$5 == \"/proc/sys\" { split($6, o, \",\"); print o[1] }' /proc/self/mountinfo); \
    echo pid1=$(cat /proc/1/comm); \
    } > /dev/termination-log";

fn seeing(node: &str, name: &str, container: Value, pod: Value) -> Value {
    let mut fields = container;
    fields["terminationMessagePolicy"] = json!("File");
    let mut made = one_container_pod(node, name, SEE, fields);
    made["spec"]["restartPolicy"] = json!("Never");
    for (field, value) in pod.as_object().unwrap() {
        made["spec"][field] = value.clone();
    }
    made
}

fn pods(node: &str) -> Vec<Value> {
    vec![
        seeing(
            node,
            "confined",
            json!({"securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            }}),
            json!({"securityContext": {
                "runAsUser": 1000,
                "runAsGroup": 3000,
                "fsGroup": 2000,
                "supplementalGroups": [4000],
                "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}],
                "seccompProfile": {"type": "RuntimeDefault"},
            }}),
        ),
        seeing(
            node,
            "privileged",
            json!({"securityContext": {"privileged": true}}),
            json!({}),
        ),
        seeing(node, "plain", json!({}), json!({})),
        seeing(
            node,
            "host-pid",
            json!({}),
            json!({"hostPID": true, "hostIPC": true}),
        ),
        one_container_pod(
            node,
            "non-root",
            "exec sleep 3600",
            json!({"securityContext": {"runAsNonRoot": true}}),
        ),
        {
            let mut pod = one_container_pod(node, "bad-sysctl", "exec sleep 3600", json!({}));
            pod["spec"]["securityContext"] =
                json!({"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]});
            pod
        },
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn security_contexts_on_our_agent_are_the_real_kubelets() {
    let two = TwoNodes::start().await;
    let mut differences = Vec::new();
    for (ns, node) in two.nodes {
        for pod in pods(node) {
            two.create(ns, &pod).await;
        }
    }
    for name in ["confined", "privileged", "plain", "host-pid"] {
        let mut seen = Vec::new();
        for (ns, _) in two.nodes {
            let pod = two
                .pod_when(ns, name, "ended", |p| {
                    container(p)["state"]["terminated"].is_object()
                })
                .await;
            let c = container(&pod);
            seen.push(json!({
                "exitCode": c["state"]["terminated"]["exitCode"],
                "seen": c["state"]["terminated"]["message"],
                "user": c["user"],
            }));
        }
        let seen: [Value; 2] = seen.try_into().unwrap();
        TwoNodes::compare(&mut differences, name, seen);
    }
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for (ns, _) in two.nodes {
        let pod = two
            .pod_when(ns, "non-root", "held", |p| {
                container(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
            })
            .await;
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
        let waiting = &container(&pod)["state"]["waiting"];
        held.push(json!([
            waiting["reason"],
            normalized(waiting["message"].as_str().unwrap_or_default(), ns, &uid),
        ]));
        let pod = two
            .pod_when(ns, "bad-sysctl", "refused", |p| {
                p["status"]["phase"] == "Failed"
            })
            .await;
        refused.push(json!([
            pod["status"]["phase"],
            pod["status"]["reason"],
            pod["status"]["message"],
        ]));
    }
    let held: [Value; 2] = held.try_into().unwrap();
    TwoNodes::compare(&mut differences, "runAsNonRoot with a root image", held);
    let refused: [Value; 2] = refused.try_into().unwrap();
    TwoNodes::compare(&mut differences, "an unsafe sysctl", refused);
    for name in ["non-root", "bad-sysctl"] {
        let events = two.events(name, &["Failed", "SysctlForbidden"]).await;
        let mut alike = Vec::new();
        for (i, (ns, _)) in two.nodes.iter().enumerate() {
            let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
            let uid = two.api.admin("GET", &path, None).await["metadata"]["uid"]
                .as_str()
                .unwrap()
                .to_string();
            let of_node: Vec<[String; 4]> = events[i]
                .iter()
                .map(|[kind, reason, message, field]| {
                    [
                        kind.clone(),
                        reason.clone(),
                        normalized(message, ns, &uid),
                        field.clone(),
                    ]
                })
                .collect();
            alike.push(of_node);
        }
        let alike: [Vec<[String; 4]>; 2] = alike.try_into().unwrap();
        TwoNodes::compare(&mut differences, &format!("{name} Events"), alike);
    }
    two.assert_alike(&differences);
}

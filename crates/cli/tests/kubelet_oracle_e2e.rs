//! The real kubelet is the oracle for what a pod's containers get: the same
//! pod (an init container and a sidecar with a device plugin device each, an
//! app container with a device and a DRA claim of the SDK's example driver)
//! runs on a node the real kubelet v1.37.2 serves and on a node our agent
//! serves, each on a containerd of its own, under one API server and
//! scheduler. Compared container by container, up to the names that are
//! free (pod names and UIDs, roots, sandbox and container ids, device ids):
//!
//! - what a process inside sees: its environment, its `/dev` entries, its
//!   mount points;
//! - the OCI spec containerd wrote: environment, mounts, devices,
//!   annotations (the CDI edits applied);
//! - the pod's status once Running: its conditions and each container's
//!   status fields;
//! - the plugin calls: one Allocate per container holding devices, one
//!   PreStartContainer before each start, one NodePrepareResources.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::pods::*;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::containerd::{Containerd, cri_log_lines};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::real_kubelet::{DEVICE_PLUGINS, RealKubelet};
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};

const KUBELET_NODE: &str = "kubelet-node";
const OUR_NODE: &str = "agent-node";

/// What each container prints, then it sleeps (or ends, an init container).
const REPORT: &str = "echo BEGIN; env | sort; echo DEV; ls /dev | sort; \
    echo MOUNTS; cut -d' ' -f5 /proc/self/mountinfo | sort; echo END";

/// The pod, for `node`, using claim `claim`.
fn the_pod(name: &str, node: &str, claim: &str) -> Value {
    let container = |name: &str, devices: usize, claims: &[&str], then: &str| {
        let mut c = container(name, devices, claims);
        c["image"] = json!(BUSYBOX);
        c["imagePullPolicy"] = json!("IfNotPresent");
        c["command"] = json!(["sh", "-c", format!("{REPORT}; {then}")]);
        c["env"] = json!([{"name": "FROM_POD", "value": name}]);
        c
    };
    let mut sidecar = container("proxy", 1, &[], "exec sleep 3600");
    sidecar["restartPolicy"] = json!("Always");
    let mut pod = with_claims(
        with_init(
            pod(
                name,
                node,
                vec![container("main", 1, &["gpu"], "exec sleep 3600")],
            ),
            vec![container("setup", 1, &[], "exit 0"), sidecar],
        ),
        vec![named_claim("gpu", claim)],
    );
    pod["spec"]["hostNetwork"] = json!(true);
    // The kubelet's Node is not ready without a network plugin; host-network
    // pods run on it all the same.
    pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    pod
}

/// Replaces in `text` each of `names` with its placeholder.
fn normalize(text: &str, names: &[(String, &str)]) -> String {
    let mut text = text.to_string();
    for (name, placeholder) in names {
        if !name.is_empty() {
            text = text.replace(name.as_str(), placeholder);
        }
    }
    // A termination log's file name is random: 8 hex digits.
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("/containers/") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let after = &tail["/containers/".len()..];
        let end = after.find('/').map_or(after.len(), |i| i);
        let container = &after[..end];
        let file = &after[end..];
        let hex: String = file.chars().skip(1).take(8).collect();
        if hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            out.push_str(&format!("/containers/{container}/<LOG>"));
            rest = &file[9..];
        } else {
            out.push_str("/containers/");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `text` with every runtime id (64 hex digits: sandboxes, containers)
/// as `<ID>`.
fn hide_ids(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let run = chars[i..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            .count();
        if run == 64 {
            out.push_str("<ID>");
            i += run;
        } else {
            let take = run.max(1);
            out.extend(&chars[i..i + take]);
            i += take;
        }
    }
    out
}

/// What one node ran the pod with.
struct Ran {
    pod: Value,
    /// Container name → its report lines.
    reports: BTreeMap<String, Vec<String>>,
    /// Container name → its OCI spec.
    specs: BTreeMap<String, Value>,
}

async fn ran(
    cluster: &Cluster,
    name: &str,
    logs: &Path,
    containerd: &Containerd,
    diagnose: &str,
) -> Ran {
    let deadline = tokio::time::Instant::now() + LONG;
    let pod = loop {
        let pod = cluster.pod(name).await;
        let ready = pod["status"]["phase"] == "Running"
            && pod["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|all| all.iter().all(|c| c["ready"] == true))
            && pod["status"]["initContainerStatuses"]
                .as_array()
                .is_some_and(|all| {
                    all.iter()
                        .any(|c| c["name"] == "proxy" && c["ready"] == true)
                });
        if ready {
            break pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name} not running with every container ready: {}\n{}",
            pod["status"],
            diagnose
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let dir = logs.join(format!("default_{name}_{uid}"));
    let mut reports = BTreeMap::new();
    let mut specs = BTreeMap::new();
    let statuses = pod["status"]["initContainerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .chain(pod["status"]["containerStatuses"].as_array().unwrap())
        .cloned()
        .collect::<Vec<_>>();
    for status in statuses {
        let container = status["name"].as_str().unwrap().to_string();
        let log = dir.join(&container).join("0.log");
        let lines = eventually(&format!("{name}/{container}'s report"), LONG, || async {
            let lines = cri_log_lines(&log);
            lines.iter().any(|l| l == "END").then_some(lines)
        })
        .await;
        let begin = lines.iter().position(|l| l == "BEGIN").unwrap();
        let end = lines.iter().position(|l| l == "END").unwrap();
        reports.insert(container.clone(), lines[begin + 1..end].to_vec());
        let id = status["containerID"]
            .as_str()
            .unwrap()
            .strip_prefix("containerd://")
            .unwrap()
            .to_string();
        let out = containerd.ctr(&["containers", "info", &id]).await;
        assert!(out.status.success(), "ctr containers info {id}");
        let info: Value = serde_json::from_slice(&out.stdout).unwrap();
        specs.insert(container, info["Spec"].clone());
    }
    Ran {
        pod,
        reports,
        specs,
    }
}

/// The parts of an OCI spec compared: environment (sorted), mounts,
/// devices and annotations.
fn spec_view(spec: &Value) -> Value {
    let mut env: Vec<String> = spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    env.sort();
    let mut annotations: BTreeMap<String, Value> = spec["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .collect();
    // The runtime's own ids and names.
    annotations.retain(|k, _| !k.starts_with("io.kubernetes.cri.sandbox-id"));
    json!({
        "env": env,
        "mounts": spec["mounts"],
        "devices": spec["linux"]["devices"],
        "annotations": annotations,
    })
}

fn start_device_plugin(root: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"))
        .arg("--root-dir")
        .arg(root)
        .args(["--resource", RESOURCE, "--pre-start", "--devices", "2"])
        .args(["--log-level", "info", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

fn start_driver(root: &Path, kubeconfig: &Path, node: &str, cdi: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"))
        .arg("--root-dir")
        .arg(root)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-name", node, "--devices", "1"])
        .args(["--log-format", "json", "--log-level", "info"])
        .env_remove("RUST_LOG")
        .arg("--cdi-dir")
        .arg(cdi)
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_on_our_agent_gets_what_it_gets_on_the_real_kubelet() {
    let cluster = Cluster::start(&[OUR_NODE]).await;
    std::fs::create_dir_all("/var/run/example-device").unwrap();
    let logs = TempDir::new().unwrap();

    // The kubelet's node.
    let kubelet_containerd = Containerd::start().await;
    kubelet_containerd.write_example_cdi_spec(RESOURCE, 2);
    let kubelet_config = cluster.api.kubeconfig_of_node(KUBELET_NODE);
    let kubelet = RealKubelet::start(KUBELET_NODE, &kubelet_config, &kubelet_containerd).await;
    let kubelet_plugin_log = logs.path().join("kubelet-device-plugin.log");
    let _kubelet_plugin = start_device_plugin(Path::new("/var/lib/kubelet"), &kubelet_plugin_log);
    assert!(Path::new(DEVICE_PLUGINS).exists());
    let kubelet_driver_log = logs.path().join("kubelet-driver.log");
    let _kubelet_driver = start_driver(
        &kubelet.root(),
        &kubelet_config,
        KUBELET_NODE,
        &kubelet_containerd.cdi_dir(),
        &kubelet_driver_log,
    );

    // Our node.
    let our_containerd = Containerd::start().await;
    our_containerd.write_example_cdi_spec(RESOURCE, 2);
    let our_logs = logs.path().join("agent-pod-logs");
    let endpoint = our_containerd.endpoint();
    let node = Node::start_full(
        &cluster,
        OUR_NODE,
        2,
        1,
        &[
            "--container-runtime-endpoint",
            &endpoint,
            "--pod-logs-dir",
            our_logs.to_str().unwrap(),
        ],
        Some(&our_containerd.cdi_dir()),
    )
    .await;

    eventually("the kubelet's Node with the devices", LONG, || async {
        let answer = cluster
            .api
            .request(
                nodeplugins_test_support::kube_api::Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{KUBELET_NODE}"),
                None,
            )
            .await;
        (answer.status == 200 && answer.body["status"]["allocatable"][RESOURCE] == "2")
            .then_some(())
    })
    .await;

    // Our Node gets the address the kubelet found for its own (the same
    // machine's), which pods in the host's network have too.
    let kubelet_node = cluster
        .api
        .admin("GET", &format!("/api/v1/nodes/{KUBELET_NODE}"), None)
        .await;
    let addresses = json!({"status": {"addresses": kubelet_node["status"]["addresses"]}});
    cluster
        .api
        .admin(
            "PATCH",
            &format!("/api/v1/nodes/{OUR_NODE}/status"),
            Some(&addresses),
        )
        .await;
    cluster.claim("gpu-k").await;
    cluster.claim("gpu-o").await;
    cluster
        .create(&the_pod("oracle", KUBELET_NODE, "gpu-k"))
        .await;
    cluster.create(&the_pod("ours", OUR_NODE, "gpu-o")).await;
    let tail = |log: String| log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    let theirs = ran(
        &cluster,
        "oracle",
        &kubelet.pod_logs(),
        &kubelet_containerd,
        &tail(kubelet.log()),
    )
    .await;
    let ours = ran(&cluster, "ours", &our_logs, &our_containerd, "").await;

    let free = |ran: &Ran, root: PathBuf, containerd: &Containerd| {
        let uid = ran.pod["metadata"]["uid"].as_str().unwrap().to_string();
        let name = ran.pod["metadata"]["name"].as_str().unwrap().to_string();
        vec![
            (uid, "<UID>"),
            (root.display().to_string(), "<ROOT>"),
            (
                containerd.cdi_dir().parent().unwrap().display().to_string(),
                "<CONTAINERD>",
            ),
            (format!("default_{name}_"), "default_<POD>_"),
            (format!("\"{name}\""), "\"<POD>\""),
            (format!("={name}"), "=<POD>"),
        ]
    };
    let their_names = free(&theirs, kubelet.root(), &kubelet_containerd);
    let our_names = free(&ours, node.root().to_path_buf(), &our_containerd);

    for container in ["setup", "proxy", "main"] {
        let theirs_seen = normalize(&theirs.reports[container].join("\n"), &their_names);
        let ours_seen = normalize(&ours.reports[container].join("\n"), &our_names);
        assert_eq!(ours_seen, theirs_seen, "what {container} sees");

        let theirs_spec = hide_ids(&normalize(
            &spec_view(&theirs.specs[container]).to_string(),
            &their_names,
        ));
        let ours_spec = hide_ids(&normalize(
            &spec_view(&ours.specs[container]).to_string(),
            &our_names,
        ));
        let theirs_spec: Value = serde_json::from_str(&theirs_spec).unwrap();
        let ours_spec: Value = serde_json::from_str(&ours_spec).unwrap();
        for part in ["env", "mounts", "devices", "annotations"] {
            assert_eq!(
                ours_spec[part], theirs_spec[part],
                "{container}'s OCI {part}"
            );
        }
    }

    // The pod's status, field by field, up to times, ids and names.
    let shape = |pod: &Value| {
        let status = &pod["status"];
        let conditions: Vec<(String, String)> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_string(),
                    c["status"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let keys = |v: &Value| {
            v.as_object()
                .map(|o| {
                    o.keys()
                        // Not written yet: the health of each device a
                        // container holds (see the operator guide).
                        .filter(|k| *k != "allocatedResourcesStatus")
                        .cloned()
                        .collect::<BTreeSet<_>>()
                })
                .unwrap_or_default()
        };
        let containers: Vec<(String, BTreeSet<String>, Value, Value, Value)> =
            status["initContainerStatuses"]
                .as_array()
                .unwrap()
                .iter()
                .chain(status["containerStatuses"].as_array().unwrap())
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        keys(c),
                        c["ready"].clone(),
                        c["restartCount"].clone(),
                        json!(keys(&c["state"])),
                    )
                })
                .collect();
        json!({
            "phase": status["phase"],
            "keys": keys(status),
            "conditions": conditions,
            "containers": containers,
        })
    };
    assert_eq!(
        shape(&ours.pod),
        shape(&theirs.pod),
        "the pod's status: ours {:#}\ntheirs {:#}",
        ours.pod["status"],
        theirs.pod["status"]
    );

    // The plugin calls: one Allocate per container with a device (the
    // init container's device handed on or not, alike), one
    // PreStartContainer per start.
    assert_eq!(
        node.allocate_calls(),
        log_lines(&kubelet_plugin_log, "allocated"),
        "Allocate calls"
    );
    assert_eq!(
        node.pre_start_calls(),
        log_lines(&kubelet_plugin_log, "pre-started"),
        "PreStartContainer calls"
    );
    assert_eq!(
        node.prepare_calls(),
        log_lines(&kubelet_driver_log, "prepared")
    );
}

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
//!   annotations (the CDI edits applied), cgroup resources and OOM score
//!   (the pod is Burstable: its app container asks for CPU and memory);
//! - the pod's status once Running: its conditions and each container's
//!   status fields;
//! - the plugin calls: one Allocate per container holding devices, one
//!   PreStartContainer before each start, one NodePrepareResources.
//!
//! And over a pod's lifecycle, pods of each kind on both nodes at once:
//! the status of a pod that succeeds, one that fails, one whose init
//! container fails, one still initializing, one whose image may not be
//! pulled, one whose container crashes (restarted once at once, then in
//! back-off); and the order of the plugin calls for a pod deleted with a
//! grace period its container ignores (Allocate, NodePrepareResources,
//! PreStartContainer, then NodeUnprepareResources only once the grace
//! period is over and the container is gone).
//!
//! And a pod's CSI volumes, the SDK's example driver on each node
//! registered by the CSI registrar: the driver's calls (capabilities,
//! stage, publish, unpublish, unstage, each request field) are the same
//! from both, for a claim's volume and for an inline one; for a volume the
//! attach/detach controller attaches; and for a claim grown while in use
//! (the claim's status each node leaves compared too). And the same for
//! the Kubernetes end-to-end suite's CSI mock driver, unmodified, whose
//! first unstage fails, and whose stage never ends (the volume unstaged
//! with its pod all the same).
//!
//! And a pod's podCertificate projections, a key of each type, answered
//! by the Kubernetes test suite's own signer: the files (read by Go's
//! crypto as a workload reads them), their modes and the
//! PodCertificateRequests each node made are the same, and a request
//! denied holds the pod with the kubelet's FailedMount and Denied Events.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::pods::*;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::client_certificates::ClientCa;
use nodeplugins_test_support::containerd::{Containerd, cri_log_lines};
use nodeplugins_test_support::oci_image::{BUSYBOX, PAUSE};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::real_kubelet::{DEVICE_PLUGINS, RealKubelet};
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::process::{Child, Command};

const KUBELET_NODE: &str = "kubelet-node";
const OUR_NODE: &str = "agent-node";

/// What each container prints, then it sleeps (or ends, an init container).
const REPORT: &str = "echo BEGIN; env | sort; echo DEV; ls /dev | sort; \
    echo MOUNTS; cut -d' ' -f5 /proc/self/mountinfo | sort; echo END";

/// A busybox container named `name` with `devices` devices and claims
/// `claims`, running `script`, with an environment variable of its own.
fn busybox(name: &str, devices: usize, claims: &[&str], script: &str) -> Value {
    let mut c = container(name, devices, claims);
    c["image"] = json!(BUSYBOX);
    c["imagePullPolicy"] = json!("IfNotPresent");
    c["command"] = json!(["sh", "-c", script]);
    c["env"] = json!([{"name": "FROM_POD", "value": name}]);
    c
}

/// `pod` in the host's network (no CNI runs here), tolerating the
/// kubelet's Node (not ready without a network plugin; host-network pods
/// run on it all the same), with a grace period of 2 s.
fn on_host(mut pod: Value) -> Value {
    pod["spec"]["hostNetwork"] = json!(true);
    pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    pod
}

/// The pod, for `node`, using claim `claim`.
fn the_pod(name: &str, node: &str, claim: &str) -> Value {
    let reporting = |name: &str, devices: usize, claims: &[&str], then: &str| {
        busybox(name, devices, claims, &format!("{REPORT}; {then}"))
    };
    let mut sidecar = reporting("proxy", 1, &[], "exec sleep 3600");
    sidecar["restartPolicy"] = json!("Always");
    // CPU and memory asked for: a Burstable pod, each container's cgroup
    // resources and OOM score worked out from them.
    let mut main = reporting("main", 1, &["gpu"], "exec sleep 3600");
    for (list, cpu, memory) in [("requests", "100m", "64Mi"), ("limits", "200m", "128Mi")] {
        main["resources"][list]["cpu"] = json!(cpu);
        main["resources"][list]["memory"] = json!(memory);
    }
    on_host(with_claims(
        with_init(
            pod(name, node, vec![main]),
            vec![reporting("setup", 1, &[], "exit 0"), sidecar],
        ),
        vec![named_claim("gpu", claim)],
    ))
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
/// devices, annotations, cgroup resources and OOM score.
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
        "resources": spec["linux"]["resources"],
        "oomScoreAdj": spec["process"]["oomScoreAdj"],
    })
}

fn start_device_plugin(root: &Path, devices: usize, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"))
        .arg("--root-dir")
        .arg(root)
        .args(["--resource", RESOURCE, "--pre-start", "--devices"])
        .arg(devices.to_string())
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

/// The real kubelet's node and our agent's, each on its own containerd
/// with the example device plugin (`devices` devices) and the example DRA
/// driver (one GPU), under one API server and scheduler; a claim for one
/// GPU for each (`gpu-k` for the kubelet's node, `gpu-o` for ours).
struct TwoNodes {
    // Dropped in this order: our node, then the kubelet's, then the API.
    node: Node,
    our_containerd: Containerd,
    our_logs: PathBuf,
    _kubelet_driver: Child,
    _kubelet_plugin: Child,
    kubelet: RealKubelet,
    kubelet_containerd: Containerd,
    kubelet_plugin_log: PathBuf,
    kubelet_driver_log: PathBuf,
    _logs: TempDir,
    cluster: Cluster,
}

impl TwoNodes {
    async fn start(devices: usize) -> Self {
        Self::start_with(devices, &[]).await
    }

    /// [`start`](Self::start), with more controllers of the
    /// controller-manager.
    async fn start_with(devices: usize, controllers: &[&str]) -> Self {
        let cluster = Cluster::start_with(&[OUR_NODE], controllers).await;
        std::fs::create_dir_all("/var/run/example-device").unwrap();
        let logs = TempDir::new().unwrap();

        // The kubelet's node.
        let kubelet_containerd = Containerd::start().await;
        kubelet_containerd.write_example_cdi_spec(RESOURCE, devices);
        let kubelet_config = cluster.api.kubeconfig_of_node(KUBELET_NODE);
        let kubelet = RealKubelet::start(KUBELET_NODE, &kubelet_config, &kubelet_containerd).await;
        let kubelet_plugin_log = logs.path().join("kubelet-device-plugin.log");
        let kubelet_plugin =
            start_device_plugin(Path::new("/var/lib/kubelet"), devices, &kubelet_plugin_log);
        assert!(Path::new(DEVICE_PLUGINS).exists());
        let kubelet_driver_log = logs.path().join("kubelet-driver.log");
        let kubelet_driver = start_driver(
            &kubelet.root(),
            &kubelet_config,
            KUBELET_NODE,
            &kubelet_containerd.cdi_dir(),
            &kubelet_driver_log,
        );

        // Our node.
        let our_containerd = Containerd::start().await;
        our_containerd.write_example_cdi_spec(RESOURCE, devices);
        let our_logs = logs.path().join("agent-pod-logs");
        let endpoint = our_containerd.endpoint();
        let node = Node::start_full(
            &cluster,
            OUR_NODE,
            devices,
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

        let want = devices.to_string();
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
            (answer.status == 200
                && answer.body["status"]["allocatable"][RESOURCE] == want.as_str())
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
        Self {
            node,
            our_containerd,
            our_logs,
            _kubelet_driver: kubelet_driver,
            _kubelet_plugin: kubelet_plugin,
            kubelet,
            kubelet_containerd,
            kubelet_plugin_log,
            kubelet_driver_log,
            _logs: logs,
            cluster,
        }
    }

    /// Each node as (the prefix of its objects' names, its name, its
    /// root): the kubelet's first.
    fn sides(&self) -> [(&'static str, &'static str, PathBuf); 2] {
        [
            ("k", KUBELET_NODE, self.kubelet.root()),
            ("o", OUR_NODE, self.node.root().to_path_buf()),
        ]
    }

    /// The last lines of the kubelet's log, for a failure's message.
    fn kubelet_tail(&self) -> String {
        let log = self.kubelet.log();
        let mut lines: Vec<&str> = log.lines().rev().take(40).collect();
        lines.reverse();
        lines.join("\n")
    }

    /// Pod `name` once Running; on timeout, a failure naming its status
    /// and the kubelet's last lines.
    async fn running(&self, name: &str) -> Value {
        self.reach(name, |pod| pod["status"]["phase"] == "Running")
            .await
    }

    /// Pod `name` once it reached what `reached` looks for; on timeout, a
    /// failure naming its status and the kubelet's last lines.
    async fn reach(&self, name: &str, reached: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + LONG;
        loop {
            let pod = self.cluster.pod(name).await;
            if reached(&pod) {
                return pod;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} never reached what the test waits for: {:#}\n{}",
                pod["status"],
                self.kubelet_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Creates `make(name, node, claim)` on both nodes: `k-NAME` on the
    /// kubelet's with claim `gpu-k`, `o-NAME` on ours with `gpu-o`.
    async fn create_both(&self, name: &str, make: impl Fn(&str, &str, &str) -> Value) {
        let theirs = make(&format!("k-{name}"), KUBELET_NODE, "gpu-k");
        let ours = make(&format!("o-{name}"), OUR_NODE, "gpu-o");
        self.cluster.create(&theirs).await;
        self.cluster.create(&ours).await;
    }

    /// The e2e CSI mock driver on both nodes, given `flags`, its calls in
    /// `dir` (`calls-k.jsonl`, `calls-o.jsonl`), registered; each node's
    /// claim (`data-k`, `data-o`) bound to the mock's volume "1", and the
    /// mock's CSIDriver object made.
    async fn start_mocks(&self, dir: &Path, flags: &[&str]) -> Vec<(ChildProcess, ChildProcess)> {
        let mut drivers = Vec::new();
        for (side, node, root) in &self.sides() {
            let log = dir.join(format!("calls-{side}.jsonl"));
            drivers.push(start_csi_mock(root, &log, flags));
            driver_registered(&self.cluster, node, MOCK_DRIVER).await;
            bind_static_volume_of(
                &self.cluster.api,
                MOCK_DRIVER,
                &format!("data-{side}"),
                &format!("pv-{side}"),
                "1",
            )
            .await;
        }
        create_mock_driver_object(&self.cluster.api).await;
        drivers
    }

    /// Creates [`csi_pod`] `NAME` on both nodes, each mounting its node's
    /// claim (`data-k`, `data-o`).
    async fn create_claim_pods(&self, name: &str) {
        self.create_both(name, |name, node, _| {
            csi_pod(
                name,
                node,
                json!({"persistentVolumeClaim": {"claimName": format!("data-{}", &name[..1])}}),
            )
        })
        .await;
    }

    /// Waits until `k-NAME` and `o-NAME` both reached what `reached` looks
    /// for, then up to 5 s until their statuses have the same [`shape`]
    /// (the kubelet may write a last change a moment after; so may we).
    async fn same_status(&self, name: &str, reached: impl Fn(&Value) -> bool) {
        self.same_status_but(name, reached, &[]).await;
    }

    /// [`same_status`](Self::same_status), each container's fields
    /// `unlike` left out of the comparison.
    async fn same_status_but(&self, name: &str, reached: impl Fn(&Value) -> bool, unlike: &[&str]) {
        let shape = |pod: &Value| {
            let mut shape = shape(pod);
            for container in shape["containers"].as_array_mut().into_iter().flatten() {
                for field in unlike {
                    container.as_object_mut().map(|c| c.remove(*field));
                }
            }
            shape
        };
        let theirs = format!("k-{name}");
        let ours = format!("o-{name}");
        for pod in [&theirs, &ours] {
            self.reach(pod, &reached).await;
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut first = None;
        loop {
            let (k, o) = (
                self.cluster.pod(&theirs).await,
                self.cluster.pod(&ours).await,
            );
            if shape(&k) == shape(&o) {
                return;
            }
            let (k, o) = first.get_or_insert((k, o));
            if tokio::time::Instant::now() >= deadline {
                assert_eq!(
                    shape(o),
                    shape(k),
                    "{name}'s status, as first compared: ours {:#}\ntheirs {:#}",
                    o["status"],
                    k["status"]
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

/// A pod's status, field by field, up to times, ids and names: the phase,
/// the keys present, each condition's type, status and reason, and for
/// each container its keys, readiness, restart count, state and last state
/// (their kind, reason and exit code) and the health of what it holds.
fn shape(pod: &Value) -> Value {
    let status = &pod["status"];
    let conditions: Vec<Value> = status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| json!([c["type"], c["status"], c["reason"]]))
        .collect();
    let keys = |v: &Value| {
        v.as_object()
            .map(|o| o.keys().cloned().collect::<BTreeSet<_>>())
            .unwrap_or_default()
    };
    // What a container holds and how healthy: each entry's name and its
    // devices' health (the ids are free; the kubelet's order is a map's).
    let health = |c: &Value| {
        let mut entries: Vec<(String, Vec<String>)> = c["allocatedResourcesStatus"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                let mut healths: Vec<String> = e["resources"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|r| format!("{} {}", r["health"], r["message"]))
                    .collect();
                healths.sort();
                (e["name"].as_str().unwrap_or_default().to_string(), healths)
            })
            .collect();
        entries.sort();
        entries
    };
    let state = |s: &Value| {
        s.as_object().map(|o| {
            o.iter()
                .map(|(kind, what)| json!([kind, what["reason"], what["exitCode"]]))
                .collect::<Vec<_>>()
        })
    };
    let containers: Vec<Value> = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|list| status[list].as_array().cloned().unwrap_or_default())
        .map(|c| {
            json!({
                "name": c["name"],
                "keys": keys(&c),
                "ready": c["ready"],
                "started": c["started"],
                "restartCount": c["restartCount"],
                "state": state(&c["state"]),
                "lastState": state(&c["lastState"]),
                "health": health(&c),
            })
        })
        .collect();
    json!({
        "phase": status["phase"],
        "keys": keys(status),
        "conditions": conditions,
        "containers": containers,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_on_our_agent_gets_what_it_gets_on_the_real_kubelet() {
    let two = TwoNodes::start(2).await;
    let cluster = &two.cluster;
    cluster
        .create(&the_pod("oracle", KUBELET_NODE, "gpu-k"))
        .await;
    cluster.create(&the_pod("ours", OUR_NODE, "gpu-o")).await;
    let theirs = ran(
        cluster,
        "oracle",
        &two.kubelet.pod_logs(),
        &two.kubelet_containerd,
        &two.kubelet_tail(),
    )
    .await;
    let ours = ran(cluster, "ours", &two.our_logs, &two.our_containerd, "").await;

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
    let their_names = free(&theirs, two.kubelet.root(), &two.kubelet_containerd);
    let our_names = free(&ours, two.node.root().to_path_buf(), &two.our_containerd);

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
        for part in [
            "env",
            "mounts",
            "devices",
            "annotations",
            "resources",
            "oomScoreAdj",
        ] {
            assert_eq!(
                ours_spec[part], theirs_spec[part],
                "{container}'s OCI {part}"
            );
        }
    }

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
        two.node.allocate_calls(),
        log_lines(&two.kubelet_plugin_log, "allocated"),
        "Allocate calls"
    );
    assert_eq!(
        two.node.pre_start_calls(),
        log_lines(&two.kubelet_plugin_log, "pre-started"),
        "PreStartContainer calls"
    );
    assert_eq!(
        two.node.prepare_calls(),
        log_lines(&two.kubelet_driver_log, "prepared")
    );

    // Each node's heartbeat: its Lease, owned by its Node, renewed.
    let mut leases = Vec::new();
    for (_, node, _) in two.sides() {
        leases.push(renewed_lease(cluster, node).await);
    }
    assert_eq!(leases[1], leases[0], "the node's Lease");
}

/// Node `node`'s Lease in `kube-node-lease` once its `renewTime` moved
/// on, up to the node's name and UID and the times.
async fn renewed_lease(cluster: &Cluster, node: &str) -> Value {
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}");
    let first = eventually(&format!("{node}'s Lease"), LONG, || async {
        let answer = cluster
            .api
            .request(
                nodeplugins_test_support::kube_api::Identity::Admin,
                "GET",
                &path,
                None,
            )
            .await;
        (answer.status == 200).then_some(answer.body)
    })
    .await;
    let lease = eventually(&format!("{node}'s Lease renewed"), LONG, || async {
        let lease = cluster.api.admin("GET", &path, None).await;
        (lease["spec"]["renewTime"] != first["spec"]["renewTime"]).then_some(lease)
    })
    .await;
    let uid = cluster
        .api
        .admin("GET", &format!("/api/v1/nodes/{node}"), None)
        .await["metadata"]["uid"]
        .clone();
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"], uid,
        "{node}'s Lease is owned by its Node"
    );
    let mut keys: Vec<&String> = lease["metadata"].as_object().unwrap().keys().collect();
    keys.retain(|k| {
        ![
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ]
        .contains(&k.as_str())
    });
    let mut view = json!({
        "metadata": keys,
        "owner": lease["metadata"]["ownerReferences"],
        "spec": lease["spec"],
    });
    view["owner"][0]["uid"] = json!("<UID>");
    view["owner"][0]["name"] = json!(view["owner"][0]["name"] == node);
    view["spec"]["holderIdentity"] = json!(view["spec"]["holderIdentity"] == node);
    view["spec"]["renewTime"] = json!(view["spec"]["renewTime"].is_string());
    view
}

/// The plugin calls in `logs` (JSON lines of the example device plugin and
/// DRA driver) from line `from` of each on, in the order they were made:
/// each as its message and its time.
fn plugin_calls(logs: &[(&Path, usize)]) -> Vec<(OffsetDateTime, String)> {
    let mut calls = Vec::new();
    for (log, from) in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines().skip(*from) {
            let Ok(line) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let message = line["fields"]["message"].as_str().unwrap_or_default();
            if ["allocated", "pre-started", "prepared", "unprepared"].contains(&message) {
                let at = line["timestamp"].as_str().unwrap();
                let at = OffsetDateTime::parse(at, &Rfc3339).unwrap();
                calls.push((at, message.to_string()));
            }
        }
    }
    calls.sort();
    calls
}

/// The lines `log` has now.
fn lines_in(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_lifecycle_on_our_agent_is_the_real_kubelets() {
    let two = TwoNodes::start(4).await;
    let sleeping = "exec sleep 3600";
    let single = |script: &'static str, devices: usize, restart: &'static str| {
        move |name: &str, node: &str, _claim: &str| {
            let mut pod = on_host(pod(name, node, vec![busybox("main", devices, &[], script)]));
            pod["spec"]["restartPolicy"] = json!(restart);
            pod
        }
    };
    let first_state = |list: &'static str, kind: &'static str, reason: &'static str| {
        move |pod: &Value| {
            let state = &pod["status"][list][0]["state"][kind];
            state.is_object() && (reason.is_empty() || state["reason"] == reason)
        }
    };

    // A container that crashes: started, restarted at once, then again
    // after each back-off (10 s, doubling). The kubelet shows the last exit
    // as the container's state until its next sync in the back-off, and
    // `waiting: CrashLoopBackOff` from then on; we show the back-off at
    // once. So the state and the restart count (which moves on with the
    // clock) are compared apart: ours waits in CrashLoopBackOff, and on
    // both nodes PreStartContainer came before each start.
    let crashed = |pod: &Value| {
        pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "Error"
    };
    let (k_plugin_from, o_plugin_from) = (
        lines_in(&two.kubelet_plugin_log),
        lines_in(&two.node.root().join("device-plugin.log")),
    );
    two.create_both("crashing", single("echo crashing; exit 1", 1, "Always"))
        .await;
    two.same_status_but("crashing", crashed, &["state", "restartCount"])
        .await;
    // The first crash is restarted at once: ours may still be running that
    // second start when both first show a crash, and waits in the back-off
    // once it ends too.
    let backing_off = first_state("containerStatuses", "waiting", "CrashLoopBackOff");
    eventually("o-crashing waiting in CrashLoopBackOff", LONG, || async {
        backing_off(&two.cluster.pod("o-crashing").await).then_some(())
    })
    .await;
    let pre_starts = |log: &Path, from: usize| {
        plugin_calls(&[(log, from)])
            .into_iter()
            .filter(|(_, m)| m == "pre-started")
            .count()
    };
    let our_log = two.node.root().join("device-plugin.log");
    for (pod, log, from) in [
        (
            "k-crashing",
            two.kubelet_plugin_log.as_path(),
            k_plugin_from,
        ),
        ("o-crashing", our_log.as_path(), o_plugin_from),
    ] {
        // Read while the container waits out a back-off: one start per
        // restart and the first.
        let restarts = |pod: Value| pod["status"]["containerStatuses"][0]["restartCount"].as_u64();
        let (starts, counted) = eventually(&format!("{pod} between two starts"), LONG, || async {
            let before = restarts(two.cluster.pod(pod).await)?;
            let starts = pre_starts(log, from);
            let after = restarts(two.cluster.pod(pod).await)?;
            (before == after && crashed(&two.cluster.pod(pod).await)).then_some((starts, after))
        })
        .await;
        assert_eq!(
            starts as u64,
            counted + 1,
            "{pod}: PreStartContainer calls of a container started and restarted {counted} times"
        );
    }
    two.cluster.delete("k-crashing").await;
    two.cluster.delete("o-crashing").await;

    // Pods that end, one still initializing, one whose image may not be
    // pulled: all at once.
    two.create_both("succeeds", single("exit 0", 1, "Never"))
        .await;
    two.create_both("fails", single("exit 3", 0, "Never")).await;
    two.create_both("init-fails", |name, node, _| {
        let mut pod = on_host(with_init(
            pod(name, node, vec![busybox("main", 0, &[], sleeping)]),
            vec![busybox("setup", 0, &[], "exit 1")],
        ));
        pod["spec"]["restartPolicy"] = json!("Never");
        pod
    })
    .await;
    two.create_both("initializing", |name, node, _| {
        on_host(with_init(
            pod(name, node, vec![busybox("main", 0, &[], sleeping)]),
            vec![busybox("setup", 0, &[], sleeping)],
        ))
    })
    .await;
    two.create_both("never-pulled", |name, node, _| {
        let mut pod = on_host(pod(name, node, vec![busybox("main", 0, &[], sleeping)]));
        pod["spec"]["containers"][0]["image"] = json!("example.com/absent:1");
        pod["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
        pod
    })
    .await;
    let phase = |want: &'static str| move |pod: &Value| pod["status"]["phase"] == want;
    two.same_status("succeeds", phase("Succeeded")).await;
    two.same_status("fails", phase("Failed")).await;
    two.same_status("init-fails", phase("Failed")).await;
    two.same_status(
        "initializing",
        first_state("initContainerStatuses", "running", ""),
    )
    .await;
    two.same_status(
        "never-pulled",
        first_state("containerStatuses", "waiting", "ErrImageNeverPull"),
    )
    .await;

    // A pod with a device and a claim deleted with a grace period of 3 s
    // that its container ignores: the claim is unprepared only once the
    // container is gone, on both nodes, and the calls come in one order.
    let our_plugin_log = two.node.root().join("device-plugin.log");
    let our_driver_log = two.node.root().join("driver.log");
    let ours_from = [
        (our_plugin_log.as_path(), lines_in(&our_plugin_log)),
        (our_driver_log.as_path(), lines_in(&our_driver_log)),
    ];
    let theirs_from = [
        (
            two.kubelet_plugin_log.as_path(),
            lines_in(&two.kubelet_plugin_log),
        ),
        (
            two.kubelet_driver_log.as_path(),
            lines_in(&two.kubelet_driver_log),
        ),
    ];
    two.create_both("graceful", |name, node, claim| {
        on_host(with_claims(
            pod(
                name,
                node,
                vec![busybox(
                    "main",
                    1,
                    &["gpu"],
                    "trap '' TERM; exec sleep 3600",
                )],
            ),
            vec![named_claim("gpu", claim)],
        ))
    })
    .await;
    two.same_status("graceful", |pod| {
        pod["status"]["containerStatuses"][0]["ready"] == true
    })
    .await;
    let deleted_at = OffsetDateTime::now_utc();
    for name in ["k-graceful", "o-graceful"] {
        let path = format!("{PODS}/{name}?gracePeriodSeconds=3");
        two.cluster.api.admin("DELETE", &path, None).await;
    }
    for name in ["k-graceful", "o-graceful"] {
        eventually(&format!("{name} removed"), LONG, || async {
            let answer = two
                .cluster
                .api
                .request(
                    nodeplugins_test_support::kube_api::Identity::Admin,
                    "GET",
                    &format!("{PODS}/{name}"),
                    None,
                )
                .await;
            (answer.status == 404).then_some(())
        })
        .await;
    }
    let ours = plugin_calls(&ours_from);
    let theirs = plugin_calls(&theirs_from);
    let order = |calls: &[(OffsetDateTime, String)]| {
        calls.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>()
    };
    assert_eq!(order(&ours), order(&theirs), "the plugin calls' order");
    for (side, calls) in [("ours", &ours), ("the kubelet's", &theirs)] {
        let unprepared = calls
            .iter()
            .find(|(_, m)| m == "unprepared")
            .unwrap_or_else(|| panic!("{side}: no NodeUnprepareResources: {calls:?}"));
        assert!(
            unprepared.0 >= deleted_at + time::Duration::seconds(3),
            "{side}: the claim unprepared {} after the deletion, within the grace period",
            unprepared.0 - deleted_at
        );
    }
}

/// What a container prints of its volumes: each path's mode, owner, group
/// and kind (and a symlink's target), the files' contents, the mounts
/// (mount point, ro or rw, file system), and the service-account token.
const VOLUMES_REPORT: &str = r#"echo BEGIN
for d in /v/cfg /v/sec /v/down /v/proj /v/scratch /v/mem /v/host /v/made /v/local /v/hostpv /var/run/secrets/kubernetes.io/serviceaccount; do
  find "$d" | sort | while read f; do stat -c '%A %u %g %F %N' "$f"; done
done
echo CONTENT
for f in /v/local/disk-file /v/hostpv/host-file /v/cfg/a /v/cfg-a /v/cfg/dir/b.txt /v/sec/user /v/down/labels /v/down/name /v/down/note /v/down/annotations /v/down/mem_mi /v/proj/ns /v/proj/cfg-a /v/proj/ctb-name.pem /v/proj/ctb-signer.pem /v/proj/ctb-missing.pem /var/run/secrets/kubernetes.io/serviceaccount/namespace /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; do
  echo "$f: $(cat $f | tr '\n' '|')"
done
echo "/v/image: $(ls /v/image | tr '\n' '|')"
echo "/v/image-bin/busybox: $(stat -c '%A %F' /v/image-bin/busybox)"
echo MOUNTS
sed -n 's/^[^ ]* [^ ]* [^ ]* [^ ]* \([^ ]*\) \(r[ow]\)[^ ]*.* - \([^ ]*\) .*/\1 \2 \3/p' /proc/self/mountinfo | grep -E '^/v/|serviceaccount' | sort
echo TOKEN
cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo
echo END
exec sleep 3600"#;

/// The message of pod `name`'s first FailedMount Event, once it has one;
/// on timeout, a failure naming the pod's status and Events.
async fn failed_mount(cluster: &Cluster, name: &str) -> String {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let events = cluster
            .api
            .admin(
                "GET",
                &format!(
                    "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={name}"
                ),
                None,
            )
            .await;
        let items = events["items"].as_array().cloned().unwrap_or_default();
        if let Some(message) = items
            .iter()
            .find(|e| e["reason"] == "FailedMount")
            .and_then(|e| e["message"].as_str())
        {
            return message.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never had a FailedMount Event: {:#}\n{:#?}",
            cluster.pod(name).await["status"],
            items
                .iter()
                .map(|e| format!("{} {}", e["reason"], e["message"]))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The signer of the pods' certificates the Kubernetes test suite's
/// signer answers.
const POD_SIGNER: &str = "example.com/pods";
/// A signer whose requests the test denies.
const DENYING_SIGNER: &str = "example.com/denied";

/// podCertificate projections on both nodes, answered by the Kubernetes
/// test suite's own signer (`interop/cmd/podcert-signer`): a key of each
/// type, and the PodCertificateRequests each node made, compared; then a
/// request the test denies, with the kubelet's FailedMount and Denied
/// Events.
async fn pod_certificates(two: &TwoNodes) {
    let cluster = &two.cluster;
    let mut signer = Command::new(nodeplugins_test_support::go_programs::go_program(
        "podcert-signer",
    ));
    signer
        .arg("serve")
        .arg(format!(
            "--kubeconfig={}",
            cluster.api.admin_kubeconfig().display()
        ))
        .arg(format!("--signer-name={POD_SIGNER}"));
    let mut signer = ChildProcess::spawn("podcert-signer", signer);
    signer
        .wait_for_line(LONG, |l| l.contains("\"serving\""))
        .await;
    let key_types = [
        "ECDSAP256",
        "ECDSAP384",
        "ECDSAP521",
        "ED25519",
        "RSA3072",
        "RSA4096",
    ];
    two.create_both("certs", |name, node, _| {
        let mut main = busybox("main", 0, &[], "exec sleep 3600");
        main["volumeMounts"] = json!([{"name": "certs", "mountPath": "/v/certs"}]);
        let mut pod = on_host(pod(name, node, vec![main]));
        let mut sources: Vec<Value> = key_types
            .iter()
            .map(|key_type| {
                let file = key_type.to_lowercase();
                let mut source = json!({"signerName": POD_SIGNER, "keyType": key_type,
                    "credentialBundlePath": format!("{file}.pem")});
                if *key_type == "ECDSAP256" {
                    source["keyPath"] = json!("p256.key");
                    source["certificateChainPath"] = json!("p256.crt");
                    source["userAnnotations"] = json!({"example.com/note": "for the test"});
                }
                if *key_type == "ED25519" {
                    source["maxExpirationSeconds"] = json!(3600);
                }
                json!({"podCertificate": source})
            })
            .collect();
        sources.push(json!({"clusterTrustBundle": {"signerName": POD_SIGNER,
            "labelSelector": {}, "path": "ca.pem"}}));
        pod["spec"]["volumes"] =
            json!([{"name": "certs", "projected": {"defaultMode": 0o640, "sources": sources}}]);
        pod
    })
    .await;
    let mut views = Vec::new();
    for (side, _, root) in two.sides() {
        let name = format!("{side}-certs");
        let pod = two.running(&name).await;
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        let dir = root
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~projected/certs");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with("..") {
                continue;
            }
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(entry.path())
                .unwrap()
                .permissions()
                .mode()
                & 0o7777;
            files.push((file, mode));
        }
        files.sort();
        let bundles: Vec<PathBuf> = files
            .iter()
            .filter(|(f, _)| (f.ends_with(".pem") && f != "ca.pem") || f.ends_with(".crt"))
            .map(|(f, _)| dir.join(f))
            .collect();
        let out = Command::new(nodeplugins_test_support::go_programs::go_program(
            "podcert-signer",
        ))
        .arg("check")
        .args(&bundles)
        .output()
        .await
        .unwrap();
        assert!(out.status.success(), "podcert-signer check: {out:?}");
        let checks: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let mut check: Value = serde_json::from_str(l).unwrap();
                let file = Path::new(check["file"].as_str().unwrap())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                check["file"] = json!(file);
                check.as_object_mut().unwrap().remove("ts");
                check
            })
            .collect();
        let key = std::fs::read_to_string(dir.join("p256.key")).unwrap();
        let bundle = std::fs::read_to_string(dir.join("ecdsap256.pem")).unwrap();
        let chain = std::fs::read_to_string(dir.join("p256.crt")).unwrap();
        assert_eq!(
            bundle,
            format!("{key}{chain}"),
            "{name}: the bundle is the key, then the chain"
        );
        views.push((files, checks));
    }
    assert_eq!(
        views[1], views[0],
        "the projection's files, their modes, and what Go reads of them"
    );
    for check in &views[1].1 {
        if check["file"] != "p256.crt" {
            assert_eq!(check["matches"], true, "the leaf holds the key: {check}");
            assert_eq!(check["problems"], Value::Null, "{check}");
        }
    }
    let kinds: BTreeSet<String> = views[1]
        .1
        .iter()
        .filter_map(|c| c["key"].as_str().map(str::to_string))
        .collect();
    let want: BTreeSet<String> = [
        "ECDSA P-256",
        "ECDSA P-384",
        "ECDSA P-521",
        "Ed25519",
        "RSA 3072",
        "RSA 4096",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, want, "a key of each type");
    // The requests each node made, up to names and UIDs.
    let requests = pod_certificate_requests(cluster).await;
    let mut specs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for request in requests["items"].as_array().unwrap() {
        let side = request["spec"]["podName"].as_str().unwrap()[..1].to_string();
        assert!(
            !request["spec"]["stubPKCS10Request"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "a stub request: {request}"
        );
        let mut spec = request["spec"].clone();
        for field in [
            "podName",
            "podUID",
            "nodeName",
            "nodeUID",
            "stubPKCS10Request",
        ] {
            spec[field] = json!(format!("<{field}>"));
        }
        let meta = &request["metadata"];
        let owner = &meta["ownerReferences"][0];
        specs.entry(side).or_default().push(format!(
            "{} owner={}/{}/{:?}/{:?} {spec}",
            meta["generateName"],
            owner["apiVersion"],
            owner["kind"],
            owner.get("controller"),
            owner.get("blockOwnerDeletion")
        ));
    }
    for list in specs.values_mut() {
        list.sort();
    }
    assert_eq!(specs.get("o"), specs.get("k"), "the PodCertificateRequests");
    assert_eq!(specs.get("o").map(Vec::len), Some(key_types.len()));

    // Denied: the pod waits, with the kubelet's words.
    two.create_both("certs-denied", |name, node, _| {
        let mut main = busybox("main", 0, &[], "exec sleep 3600");
        main["volumeMounts"] = json!([{"name": "certs", "mountPath": "/v/certs"}]);
        let mut pod = on_host(pod(name, node, vec![main]));
        pod["spec"]["volumes"] = json!([{"name": "certs", "projected": {"sources": [
            {"podCertificate": {"signerName": DENYING_SIGNER, "keyType": "ECDSAP256",
                "credentialBundlePath": "bundle.pem"}}]}}]);
        pod
    })
    .await;
    let denied = std::sync::Mutex::new(BTreeSet::new());
    eventually("both requests denied", LONG, || async {
        let requests = pod_certificate_requests(cluster).await;
        for request in requests["items"].as_array().into_iter().flatten() {
            let name = request["metadata"]["name"].as_str().unwrap().to_string();
            if request["spec"]["signerName"] != DENYING_SIGNER
                || denied.lock().unwrap().contains(&name)
            {
                continue;
            }
            let now = OffsetDateTime::now_utc()
                .replace_nanosecond(0)
                .unwrap()
                .format(&Rfc3339)
                .unwrap();
            let mut request = request.clone();
            request["status"] = json!({"conditions": [{"type": "Denied", "status": "True",
                "reason": "Policy", "message": "not \"this\" pod",
                "lastTransitionTime": now}]});
            cluster
                .api
                .admin(
                    "PUT",
                    &format!(
                        "/apis/certificates.k8s.io/v1/namespaces/default/podcertificaterequests/{name}/status"
                    ),
                    Some(&request),
                )
                .await;
            denied.lock().unwrap().insert(name);
        }
        (denied.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    let mut said = Vec::new();
    for side in ["k", "o"] {
        let name = format!("{side}-certs-denied");
        let mount = event_with(cluster, &name, "FailedMount", "denied").await;
        let event = event_with(cluster, &name, "Denied", "").await;
        said.push((mount, hide_request_name(&event)));
    }
    assert_eq!(said[1], said[0], "the FailedMount and Denied Events");
    assert_eq!(
        said[0].0,
        "MountVolume.SetUp failed for volume \"certs\" : PodCertificateRequest was permanently denied: reason=\"Policy\" message=\"not \\\"this\\\" pod\""
    );
    two.same_status("certs-denied", |pod| {
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    })
    .await;
    // Our node counts them as the kubelet's gauge does.
    eventually("the pod certificates' states in /metrics", LONG, || async {
        let status = common::status_json(two.node.root()).await?;
        let (_, metrics) = common::http_get(status["metrics_addr"].as_str()?, "/metrics").await;
        (metrics.contains(&format!(
            "kubelet_podcertificate_states{{signer_name=\"{POD_SIGNER}\",state=\"fresh\"}} {}",
            key_types.len()
        )) && metrics.contains(&format!(
            "kubelet_podcertificate_states{{signer_name=\"{DENYING_SIGNER}\",state=\"denied\"}} 1"
        )))
        .then_some(())
    })
    .await;
    signer.kill().await;
}

/// The PodCertificateRequests of the namespace `default`.
async fn pod_certificate_requests(cluster: &Cluster) -> Value {
    cluster
        .api
        .admin(
            "GET",
            "/apis/certificates.k8s.io/v1/namespaces/default/podcertificaterequests",
            None,
        )
        .await
}

/// The message of the first Event `reason` on pod `name` whose message
/// holds `holding`, once there is one.
async fn event_with(cluster: &Cluster, name: &str, reason: &str, holding: &str) -> String {
    eventually(
        &format!("{name}'s {reason} Event holding {holding:?}"),
        LONG,
        || async {
            let events = cluster
                .api
                .admin(
                    "GET",
                    &format!(
                        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={name}"
                    ),
                    None,
                )
                .await;
            events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["reason"] == reason)
                .filter_map(|e| e["message"].as_str())
                .find(|m| m.contains(holding))
                .map(str::to_string)
        },
    )
    .await
}

/// `text` with PodCertificateRequest names (`req-xxxxx`) hidden.
fn hide_request_name(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("/req-") {
        out.push_str(&rest[..at]);
        out.push_str("/req-<NAME>");
        let after = &rest[at + "/req-".len()..];
        let end = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(after.len());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A pod with a volume of each in-tree kind (claims of a `local` and of a
/// `hostPath` PersistentVolume too: `lpvc-<side>`, `hpvc-<side>`; an
/// `image` volume of the sandbox image, whole and by a subPath), its
/// service-account token projected by the API server
/// (`kube-api-access-*`), and an fsGroup.
fn volumes_pod(name: &str, node: &str) -> Value {
    let mut main = busybox("main", 0, &[], VOLUMES_REPORT);
    main["resources"] = json!({"limits": {"memory": "64Mi"}});
    main["volumeMounts"] = json!([
        {"name": "cfg", "mountPath": "/v/cfg"},
        {"name": "sec", "mountPath": "/v/sec"},
        {"name": "down", "mountPath": "/v/down"},
        {"name": "proj", "mountPath": "/v/proj"},
        {"name": "scratch", "mountPath": "/v/scratch"},
        {"name": "mem", "mountPath": "/v/mem"},
        {"name": "host", "mountPath": "/v/host", "readOnly": true, "recursiveReadOnly": "IfPossible"},
        {"name": "cfg", "mountPath": "/v/cfg-a", "subPath": "a"},
        {"name": "scratch", "mountPath": "/v/made", "subPath": "new/dir"},
        {"name": "local", "mountPath": "/v/local"},
        {"name": "hostpv", "mountPath": "/v/hostpv"},
        {"name": "img", "mountPath": "/v/image"},
        {"name": "img", "mountPath": "/v/image-bin", "subPath": "bin"},
    ]);
    let side = &name[..1];
    let mut pod = on_host(pod(name, node, vec![main]));
    pod["metadata"]["labels"] = json!({"app": "volumes", "tier": "front"});
    pod["metadata"]["annotations"] = json!({"note": "a \"quoted\" one\nover two lines"});
    pod["spec"]["automountServiceAccountToken"] = json!(true);
    pod["spec"]["securityContext"] = json!({"fsGroup": 2000});
    pod["spec"]["volumes"] = json!([
        {"name": "cfg", "configMap": {"name": "volumes-cfg", "items": [
            {"key": "a", "path": "a"}, {"key": "b", "path": "dir/b.txt", "mode": 0o600}]}},
        {"name": "sec", "secret": {"secretName": "volumes-sec", "defaultMode": 0o440}},
        {"name": "down", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "note", "fieldRef": {"fieldPath": "metadata.annotations['note']"}},
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
            {"path": "mem_mi", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}},
        ]}},
        {"name": "proj", "projected": {"sources": [
            {"configMap": {"name": "volumes-cfg", "items": [{"key": "a", "path": "cfg-a"}]}},
            {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            {"secret": {"name": "volumes-missing", "optional": true}},
            {"clusterTrustBundle": {"name": "volumes-ctb", "path": "ctb-name.pem"}},
            {"clusterTrustBundle": {"signerName": "example.com/volumes",
                "labelSelector": {"matchLabels": {"trust": "yes"}}, "path": "ctb-signer.pem"}},
            {"clusterTrustBundle": {"name": "volumes-ctb-missing", "optional": true, "path": "ctb-missing.pem"}},
        ]}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": "host", "hostPath": {"path": "/var/run/example-device", "type": "Directory"}},
        {"name": "local", "persistentVolumeClaim": {"claimName": format!("lpvc-{side}")}},
        {"name": "hostpv", "persistentVolumeClaim": {"claimName": format!("hpvc-{side}"), "readOnly": true}},
        {"name": "img", "image": {"reference": PAUSE, "pullPolicy": "Never"}},
        {"name": "unused", "secret": {"secretName": "nowhere"}},
    ]);
    pod
}

/// The claims of a service-account token (its JWT's middle part), those
/// that do not differ between two nodes' pods: audience, issuer, subject,
/// and the namespace, pod and service account it is bound to.
fn token_claims(token: &str, names: &[(String, &str)]) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap_or_else(|e| panic!("the token {token:?} is no JWT: {e}"));
    let claims: Value = serde_json::from_slice(&bytes).unwrap();
    let k8s = &claims["kubernetes.io"];
    let claims = json!({
        "aud": claims["aud"],
        "iss": claims["iss"],
        "sub": claims["sub"],
        "namespace": k8s["namespace"],
        "pod": k8s["pod"]["name"],
        "serviceaccount": k8s["serviceaccount"]["name"],
        "node": k8s["node"]["name"],
        "lifetime": claims["exp"].as_i64().zip(claims["iat"].as_i64()).map(|(e, i)| e - i),
    });
    serde_json::from_str(&normalize(&claims.to_string(), names)).unwrap()
}

/// `text` with the name of the token's volume made alike: the API server
/// names it `kube-api-access-` and 5 random characters.
fn hide_token_volume(text: &str) -> String {
    let mut text = text.to_string();
    if let Some(at) = text.find("kube-api-access-") {
        let start = at + "kube-api-access-".len();
        let end = (start + 5).min(text.len());
        text.replace_range(start..end, "<ID>");
    }
    text
}

/// `text` with the directory containerd mounts an image volume from (its
/// state directory and the pod sandbox's id) hidden: `<IMAGE-VOLUMES>/`,
/// then the image's own directory.
fn hide_image_volume_dir(text: &str) -> String {
    const DIR: &str = "/io.containerd.grpc.v1.cri/image-volumes/";
    let Some(at) = text.find(DIR) else {
        return text.to_string();
    };
    let start = text[..at].rfind('"').map_or(0, |q| q + 1);
    let after = at + DIR.len();
    let end = text[after..].find('/').map_or(text.len(), |e| after + e);
    format!("{}<IMAGE-VOLUMES>{}", &text[..start], &text[end..])
}

/// A volume report with what is free between nodes made alike: the
/// timestamped directories' names (and so the length of the links to
/// them), the token's size, and a disk's file system (both are disks).
fn volumes_view(lines: &[String], names: &[(String, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = "";
    for line in lines {
        let line = normalize(line, names);
        if ["CONTENT", "MOUNTS", "TOKEN"].contains(&line.as_str()) {
            section = if line == "TOKEN" { "TOKEN" } else { "" };
            out.push(line);
            continue;
        }
        if section == "TOKEN" {
            continue;
        }
        // When each node first saw its pod (the kubelet's own annotation,
        // which the downward API shows).
        let line = match line.find("config.seen=\"") {
            Some(at) => {
                let start = at + "config.seen=\"".len();
                let end = line[start..].find('"').map_or(line.len(), |e| start + e);
                format!("{}<SEEN>{}", &line[..start], &line[end..])
            }
            None => line,
        };
        let mut words: Vec<String> = line.split(' ').map(str::to_string).collect();
        for word in &mut words {
            *word = hide_token_volume(word);
            if let Some(at) = word.find("..20") {
                let end = word[at..].find(['\'', '/']).map_or(word.len(), |e| at + e);
                word.replace_range(at..end, "..<TS>");
            }
        }
        if line.starts_with('/') && words.len() == 3 && words[2] != "tmpfs" {
            words[2] = "<disk>".into();
        }
        out.push(words.join(" "));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_volumes_on_our_agent_are_what_the_real_kubelet_makes() {
    let two = TwoNodes::start(1).await;
    let cluster = &two.cluster;
    let ca = std::fs::read_to_string(cluster.api.ca_file()).unwrap();
    for object in [
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": ca}}),
        ),
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "volumes-cfg"}, "data": {"a": "1", "b": "two\nlines"}}),
        ),
        (
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "volumes-sec"}, "stringData": {"user": "admin"}}),
        ),
    ] {
        cluster
            .api
            .admin(
                "POST",
                &format!("/api/v1/namespaces/default/{}", object.0),
                Some(&object.1),
            )
            .await;
    }
    // Trust bundles: one by name, one of a signer that a label selects
    // (and one of that signer that it does not), each a CA of its own.
    let (by_name, by_signer, unselected) = (ClientCa::new(), ClientCa::new(), ClientCa::new());
    for (name, signer, labels, ca) in [
        ("volumes-ctb", None, json!({}), &by_name),
        (
            "example.com:volumes:one",
            Some("example.com/volumes"),
            json!({"trust": "yes"}),
            &by_signer,
        ),
        (
            "example.com:volumes:two",
            Some("example.com/volumes"),
            json!({"trust": "no"}),
            &unselected,
        ),
    ] {
        let mut spec = json!({"trustBundle": ca.pem()});
        if let Some(signer) = signer {
            spec["signerName"] = json!(signer);
        }
        cluster
            .api
            .admin(
                "POST",
                "/apis/certificates.k8s.io/v1/clustertrustbundles",
                Some(
                    &json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
                    "metadata": {"name": name, "labels": labels}, "spec": spec}),
                ),
            )
            .await;
    }
    // Each node's claims of a local volume (a directory of the node, its
    // node affinity a label both nodes are given) and of a hostPath
    // volume, the latter mounted read-only by the pod's claim.
    let disks = TempDir::new().unwrap();
    for (side, node, _) in two.sides() {
        cluster
            .api
            .admin(
                "PATCH",
                &format!("/api/v1/nodes/{node}"),
                Some(&json!({"metadata": {"labels": {"example.com/disk": "yes"}}})),
            )
            .await;
        let disk = disks.path().join(format!("disk-{side}"));
        let host = disks.path().join(format!("hostpv-{side}"));
        for (dir, file) in [(&disk, "disk-file"), (&host, "host-file")] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(file), "on the node").unwrap();
        }
        let local = json!({
            "local": {"path": disk},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "example.com/disk", "operator": "In", "values": ["yes"]}]}]}},
        });
        bind_volume(
            &cluster.api,
            &format!("lpvc-{side}"),
            &format!("lpv-{side}"),
            &local,
        )
        .await;
        // No mount options: the kubelet refuses them on a hostPath volume.
        let host_path = json!({"hostPath": {"path": host, "type": "Directory"},
                               "mountOptions": null});
        bind_volume(
            &cluster.api,
            &format!("hpvc-{side}"),
            &format!("hpv-{side}"),
            &host_path,
        )
        .await;
    }
    two.create_both("volumes", |name, node, _| volumes_pod(name, node))
        .await;

    let mut views = Vec::new();
    for (name, logs, root, containerd, diagnose) in [
        (
            "k-volumes",
            two.kubelet.pod_logs(),
            two.kubelet.root(),
            &two.kubelet_containerd,
            two.kubelet_tail(),
        ),
        (
            "o-volumes",
            two.our_logs.clone(),
            two.node.root().to_path_buf(),
            &two.our_containerd,
            String::new(),
        ),
    ] {
        let pod = two.running(name).await;
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
        let log = logs
            .join(format!("default_{name}_{uid}"))
            .join("main/0.log");
        let lines = eventually(&format!("{name}'s report"), LONG, || async {
            let lines = cri_log_lines(&log);
            lines.iter().any(|l| l == "END").then_some(lines)
        })
        .await;
        let begin = lines.iter().position(|l| l == "BEGIN").unwrap();
        let end = lines.iter().position(|l| l == "END").unwrap();
        let report = lines[begin + 1..end].to_vec();
        let names = vec![
            (uid.clone(), "<UID>"),
            (root.display().to_string(), "<ROOT>"),
            (name.to_string(), "<POD>"),
            (
                if name.starts_with("k-") {
                    KUBELET_NODE
                } else {
                    OUR_NODE
                }
                .to_string(),
                "<NODE>",
            ),
        ];
        let side = &name[..1];
        let mut names = names;
        names.extend([
            (
                disks
                    .path()
                    .join(format!("disk-{side}"))
                    .display()
                    .to_string(),
                "<DISK>",
            ),
            (
                disks
                    .path()
                    .join(format!("hostpv-{side}"))
                    .display()
                    .to_string(),
                "<HOSTPV>",
            ),
            (format!("lpv-{side}"), "<LPV>"),
            (format!("hpv-{side}"), "<HPV>"),
        ]);
        let token = report
            .iter()
            .skip_while(|l| *l != "TOKEN")
            .nth(1)
            .cloned()
            .unwrap_or_default();
        // The volume mounts containerd was asked for, as the OCI spec has
        // them: destination, source, type and options.
        let id = pod["status"]["containerStatuses"][0]["containerID"]
            .as_str()
            .unwrap()
            .trim_start_matches("containerd://")
            .to_string();
        let out = containerd.ctr(&["containers", "info", &id]).await;
        assert!(out.status.success(), "ctr containers info {id}");
        let info: Value = serde_json::from_slice(&out.stdout).unwrap();
        let oci: Vec<String> = info["Spec"]["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                let to = m["destination"].as_str().unwrap_or_default();
                to.starts_with("/v/") || to.contains("serviceaccount") || to == "/etc/hosts"
            })
            .map(|m| {
                let mut options: Vec<String> = m["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| o.as_str().unwrap_or_default().to_string())
                    .collect();
                options.sort();
                hide_image_volume_dir(&hide_token_volume(&normalize(
                    &format!(
                        "{} {} {} {}",
                        m["destination"],
                        m["source"],
                        m["type"],
                        options.join(",")
                    ),
                    &names,
                )))
            })
            .collect();
        let mut view = volumes_view(&report, &names);
        view.push("OCI".into());
        view.extend(oci);
        views.push((view, token_claims(&token, &names), diagnose));
        // What the node keeps of the pod's volumes, on disk.
        let volumes = root.join("pods").join(&uid).join("volumes");
        assert!(
            volumes.join("kubernetes.io~projected").is_dir(),
            "{name}: the kube-api-access volume under {}",
            volumes.display()
        );
        assert!(
            !volumes.join("kubernetes.io~secret/unused").exists(),
            "{name}: a volume no container mounts is not set up"
        );
    }
    let (theirs, their_claims, diagnose) = &views[0];
    let (ours, our_claims, _) = &views[1];
    let only_ours: Vec<&String> = ours.iter().filter(|l| !theirs.contains(l)).collect();
    let only_theirs: Vec<&String> = theirs.iter().filter(|l| !ours.contains(l)).collect();
    assert_eq!(
        ours, theirs,
        "what the container sees of its volumes: only ours {only_ours:#?}\nonly theirs {only_theirs:#?}\n{diagnose}"
    );
    assert_eq!(our_claims, their_claims, "the token's claims");
    let content = |file: &str| {
        ours.iter()
            .find_map(|l| l.strip_prefix(&format!("{file}: ")))
            .unwrap_or_default()
            .to_string()
    };
    for file in ["/v/proj/ctb-name.pem", "/v/proj/ctb-signer.pem"] {
        assert_eq!(
            content(file).matches("-----BEGIN CERTIFICATE-----").count(),
            1,
            "{file}: the one bundle's certificate: {}",
            content(file)
        );
    }
    assert!(
        ours.iter()
            .any(|l| l.trim_end() == "/v/proj/ctb-missing.pem:"),
        "an optional bundle missing is an empty file"
    );
    two.same_status("volumes", |pod| pod["status"]["phase"] == "Running")
        .await;
    let mounts = |pod: Value| {
        hide_token_volume(&pod["status"]["containerStatuses"][0]["volumeMounts"].to_string())
    };
    assert_eq!(
        mounts(cluster.pod("o-volumes").await),
        mounts(cluster.pod("k-volumes").await),
        "the container status's volume mounts"
    );
    assert_eq!(
        cluster.pod("o-volumes").await["status"]["allocatedResources"],
        cluster.pod("k-volumes").await["status"]["allocatedResources"],
        "the pod's allocated resources (its memory request written as the API writes it)"
    );

    // A pod whose ConfigMap is not there yet waits, with the kubelet's
    // FailedMount Event, and runs once the ConfigMap is made.
    two.create_both("waits", |name, node, _| {
        let mut main = busybox("main", 0, &[], "exec sleep 3600");
        main["volumeMounts"] = json!([{"name": "later", "mountPath": "/v/later"}]);
        let mut pod = on_host(pod(name, node, vec![main]));
        pod["spec"]["volumes"] = json!([{"name": "later", "configMap": {"name": "volumes-later"}}]);
        pod
    })
    .await;
    let messages = [
        failed_mount(cluster, "k-waits").await,
        failed_mount(cluster, "o-waits").await,
    ];
    assert_eq!(messages[1], messages[0], "the FailedMount Event's message");
    assert_eq!(
        messages[0],
        "MountVolume.SetUp failed for volume \"later\" : configmap \"volumes-later\" not found"
    );

    // Volumes the kubelet refuses, each with its own words: a gitRepo (its
    // plugin locked off), a hostPath PersistentVolume with mount options,
    // a local one whose node affinity the node does not meet.
    for (side, _, _) in two.sides() {
        let host = json!({"hostPath": {"path": "/tmp", "type": "Directory"}});
        bind_volume(
            &cluster.api,
            &format!("optspvc-{side}"),
            &format!("optspv-{side}"),
            &host,
        )
        .await;
        let away = json!({
            "local": {"path": "/tmp"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "example.com/disk", "operator": "In", "values": ["elsewhere"]}]}]}},
        });
        bind_volume(
            &cluster.api,
            &format!("awaypvc-{side}"),
            &format!("awaypv-{side}"),
            &away,
        )
        .await;
    }
    let refused = [
        (
            "git",
            json!({"gitRepo": {"repository": "https://example.com/repo.git"}}),
            "MountVolume.SetUp failed for volume \"refused\" : git-repo volume plugin has been disabled; if necessary, it may be re-enabled by enabling the feature-gate `GitRepoVolumeDriver`",
        ),
        (
            "opts",
            json!({"persistentVolumeClaim": {"claimName": "optspvc-<SIDE>"}}),
            "MountVolume.MountOptionSupport check failed for volume \"optspv-<SIDE>\" : mount options are not supported for this volume type",
        ),
        (
            "away",
            json!({"persistentVolumeClaim": {"claimName": "awaypvc-<SIDE>"}}),
            "MountVolume.NodeAffinity check failed for volume \"awaypv-<SIDE>\" : no matching NodeSelectorTerms",
        ),
    ];
    for (what, volume, expected) in refused {
        two.create_both(&format!("refused-{what}"), |name, node, _| {
            let mut main = busybox("main", 0, &[], "exec sleep 3600");
            main["volumeMounts"] = json!([{"name": "refused", "mountPath": "/v/refused"}]);
            let mut pod = on_host(pod(name, node, vec![main]));
            let mut volume = volume.clone();
            if let Some(claim) = volume.pointer_mut("/persistentVolumeClaim/claimName") {
                *claim = json!(claim.as_str().unwrap().replace("<SIDE>", &name[..1]));
            }
            volume["name"] = json!("refused");
            pod["spec"]["volumes"] = json!([volume]);
            // Bound by hand: the scheduler would not place a pod whose
            // volume's node affinity no node meets, and the node's own
            // check is what is compared.
            pod["spec"]["nodeName"] = json!(node);
            pod
        })
        .await;
        let mut said = Vec::new();
        for side in ["k", "o"] {
            let message = failed_mount(cluster, &format!("{side}-refused-{what}")).await;
            said.push(message.replace(&format!("-{side}\""), "-<SIDE>\""));
        }
        assert_eq!(said[1], said[0], "the FailedMount Event of a {what} volume");
        assert_eq!(
            said[0], expected,
            "the kubelet's FailedMount Event of a {what} volume"
        );
    }

    pod_certificates(&two).await;

    // An image volume whose image is not there, with pull policy Never:
    // the container waits as for its own image.
    two.create_both("noimage", |name, node, _| {
        let mut main = busybox("main", 0, &[], "exec sleep 3600");
        main["volumeMounts"] = json!([{"name": "img", "mountPath": "/v/img"}]);
        let mut pod = on_host(pod(name, node, vec![main]));
        pod["spec"]["volumes"] = json!([{"name": "img", "image":
            {"reference": "nodeplugins.local/absent:1", "pullPolicy": "Never"}}]);
        pod
    })
    .await;
    two.same_status("noimage", |pod| {
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    })
    .await;
    two.same_status("waits", |pod| {
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    })
    .await;
    cluster
        .api
        .admin(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "volumes-later"}, "data": {"x": "1"}})),
        )
        .await;
    two.same_status("waits", |pod| pod["status"]["phase"] == "Running")
        .await;

    // Deleted: every volume torn down and the pod's directory gone before
    // the pod object is.
    for name in ["k-volumes", "o-volumes"] {
        let pod = cluster.pod(name).await;
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
        cluster
            .api
            .admin(
                "DELETE",
                &format!("/api/v1/namespaces/default/pods/{name}"),
                None,
            )
            .await;
        let root = if name.starts_with("k-") {
            two.kubelet.root()
        } else {
            two.node.root().to_path_buf()
        };
        pod_gone(cluster, name).await;
        let volumes = root.join("pods").join(&uid).join("volumes");
        if name.starts_with("o-") {
            assert!(!volumes.exists(), "{name}: its volumes are gone before it");
        } else {
            // The kubelet removes the emptied directories in its
            // housekeeping, after the pod.
            eventually(
                &format!("{name}'s volume directories gone"),
                LONG,
                || async { (!volumes.exists()).then_some(()) },
            )
            .await;
        }
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !table.contains(&uid),
            "{name}: nothing of it is left mounted"
        );
    }
}

/// A pod for `node` mounting `volume` (named `data`), printing what it
/// holds.
fn csi_pod(name: &str, node: &str, volume: Value) -> Value {
    let mut main = busybox(
        "main",
        0,
        &[],
        "cat /data/hello; echo ready > /data/by-$HOSTNAME || true; exec sleep 3600",
    );
    main["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    let mut pod = on_host(pod(name, node, vec![main]));
    let mut volume = volume;
    volume["name"] = json!("data");
    pod["spec"]["volumes"] = json!([volume]);
    pod
}

/// The driver's calls, each `method request error` with `names` replaced
/// by their placeholders and an inline volume's handle (derived from its
/// pod's UID) as `<HANDLE>`.
fn normalized_calls(calls: &[Value], names: &[(String, &str)]) -> Vec<String> {
    calls
        .iter()
        .map(|call| {
            let mut request = call["request"].clone();
            // A token's bytes and expiry differ between two pods; its
            // audience and fields do not.
            let tokens = &mut request["volume_context"]["csi.storage.k8s.io/serviceAccount.tokens"];
            if let Some(text) = tokens.as_str() {
                let mut parsed: Value = serde_json::from_str(text).unwrap();
                for status in parsed.as_object_mut().unwrap().values_mut() {
                    for field in status.as_object_mut().unwrap().values_mut() {
                        *field = json!("<TOKEN>");
                    }
                }
                *tokens = parsed;
            }
            let handle = request["volume_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if handle.starts_with("csi-") {
                request["volume_id"] = json!("<HANDLE>");
            }
            normalize(
                &format!("{} {} {}", call["method"], request, call["error"]),
                names,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_csi_volumes_get_the_same_driver_calls_from_our_agent_as_from_the_real_kubelet() {
    let two = TwoNodes::start(1).await;
    let cluster = &two.cluster;
    let dir = TempDir::new().unwrap();
    let sides = two.sides();
    let log_of = |side: &str| dir.path().join(format!("calls-{side}.jsonl"));
    let mut drivers = Vec::new();
    for (side, node, root) in &sides {
        let state = dir.path().join(format!("state-{side}"));
        std::fs::create_dir_all(state.join("vol-1")).unwrap();
        std::fs::write(state.join("vol-1/hello"), "from the driver").unwrap();
        drivers.push(start_csi_driver(root, node, &state, &log_of(side), &[]));
        driver_registered(cluster, node, "csi.example.com").await;
        bind_static_volume(
            &cluster.api,
            &format!("data-{side}"),
            &format!("pv-{side}"),
            "vol-1",
        )
        .await;
    }
    create_csi_driver_object(&cluster.api).await;
    let steps = [
        ("claim", "NodePublishVolume", 1),
        ("inline", "NodePublishVolume", 2),
        ("claim", "NodeUnstageVolume", 1),
        ("inline", "NodeUnpublishVolume", 2),
    ];
    let inline = json!({"csi": {"driver": "csi.example.com", "volumeAttributes": {"size": "1Mi"}}});
    claim_and_inline_calls_alike(&two, dir.path(), Some(&inline), &steps).await;
    drop(drivers);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_tree_ebs_volume_is_served_by_its_csi_driver_as_the_real_kubelet_serves_it() {
    // The example driver registered as `ebs.csi.aws.com` (reporting its
    // zone under the driver's topology key, as the EBS driver does) on
    // each node; a claim bound to an in-tree `awsElasticBlockStore`
    // PersistentVolume whose node affinity names the GA zone key, and a
    // pod's inline `awsElasticBlockStore` named by its `aws://` id. Both
    // nodes must translate each into a volume of the driver (handle,
    // attributes, access mode, the affinity moved to the driver's key),
    // stage it and publish it alike.
    let two = TwoNodes::start(1).await;
    let cluster = &two.cluster;
    let dir = TempDir::new().unwrap();
    let sides = two.sides();
    let log_of = |side: &str| dir.path().join(format!("calls-{side}.jsonl"));
    let mut drivers = Vec::new();
    for (side, node, root) in &sides {
        let state = dir.path().join(format!("state-{side}"));
        for volume in ["vol-c", "vol-i"] {
            std::fs::create_dir_all(state.join(volume)).unwrap();
            std::fs::write(state.join(volume).join("hello"), "from the driver").unwrap();
        }
        drivers.push(start_csi_driver(
            root,
            node,
            &state,
            &log_of(side),
            &["--driver-name=ebs.csi.aws.com"],
        ));
        driver_registered(cluster, node, "ebs.csi.aws.com").await;
        let source = json!({
            "awsElasticBlockStore": {"volumeID": "vol-c", "fsType": "ext4", "partition": 1},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}},
        });
        bind_volume(
            &cluster.api,
            &format!("data-{side}"),
            &format!("pv-{side}"),
            &source,
        )
        .await;
    }
    cluster
        .api
        .admin(
            "POST",
            "/apis/storage.k8s.io/v1/csidrivers",
            Some(
                &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": "ebs.csi.aws.com"},
                "spec": {"attachRequired": false, "podInfoOnMount": false,
                         "volumeLifecycleModes": ["Persistent"]}}),
            ),
        )
        .await;
    let steps = [
        ("claim", "NodePublishVolume", 1),
        ("inline", "NodePublishVolume", 2),
        ("claim", "NodeUnstageVolume", 1),
        ("inline", "NodeUnstageVolume", 2),
    ];
    let inline =
        json!({"awsElasticBlockStore": {"volumeID": "aws://zone-a/vol-i", "fsType": "ext4"}});
    claim_and_inline_calls_alike(&two, dir.path(), Some(&inline), &steps).await;
    drop(drivers);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_e2e_mock_drivers_volumes_get_the_same_calls_from_our_agent_as_from_the_real_kubelet() {
    // The Kubernetes end-to-end suite's CSI mock driver, unmodified, on
    // each node, with its own volume "1" as the claim's; its first
    // NodeUnstageVolume fails, so that the retry is compared too. Claims
    // only: the mock fails on an inline volume's publish (it looks up a
    // volume it does not have).
    let two = TwoNodes::start(1).await;
    let dir = TempDir::new().unwrap();
    let drivers = two
        .start_mocks(dir.path(), &["--fail", "NodeUnstageVolume=Internal:1"])
        .await;
    let steps = [
        ("claim", "NodePublishVolume", 1),
        ("claim", "NodeUnstageVolume", 2),
    ];
    claim_and_inline_calls_alike(&two, dir.path(), None, &steps).await;
    drop(drivers);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_whose_stage_may_have_been_done_is_unstaged_with_its_pod_as_the_real_kubelet_does()
{
    // Every NodeStageVolume of the mock answers DeadlineExceeded: the
    // driver may still be at work, so the volume may be staged. The pod
    // waits; once it is deleted, each node unstages the volume all the
    // same. How many stages each tried depends on its back-off: what is
    // compared is what each called after its last one.
    let two = TwoNodes::start(1).await;
    let cluster = &two.cluster;
    let dir = TempDir::new().unwrap();
    let sides = two.sides();
    let log_of = |side: &str| dir.path().join(format!("calls-{side}.jsonl"));
    let drivers = two
        .start_mocks(dir.path(), &["--fail", "NodeStageVolume=DeadlineExceeded"])
        .await;
    two.create_claim_pods("unsure").await;
    for (side, ..) in &sides {
        eventually(&format!("{side}-unsure's stage tried"), LONG, || async {
            methods(&csi_calls(&log_of(side)))
                .iter()
                .any(|m| m == "NodeStageVolume")
                .then_some(())
        })
        .await;
        cluster
            .api
            .admin(
                "DELETE",
                &format!("/api/v1/namespaces/default/pods/{side}-unsure"),
                None,
            )
            .await;
    }
    let after_stages = |side: &str, node: &str, root: &Path| {
        let calls = csi_calls(&log_of(side));
        let last = calls
            .iter()
            .rposition(|c| c["method"] == "NodeStageVolume")
            .unwrap();
        let names = vec![
            (root.display().to_string(), "<ROOT>"),
            (format!("pv-{side}"), "<PV>"),
            (node.to_string(), "<NODE>"),
        ];
        normalized_calls(&calls[last + 1..], &names)
    };
    for (side, node, root) in &sides {
        eventually(&format!("{node} unstaged the volume"), LONG, || async {
            let after = after_stages(side, node, root);
            after
                .iter()
                .any(|c| c.starts_with("\"NodeUnstageVolume\""))
                .then_some(())
        })
        .await;
        pod_gone(cluster, &format!("{side}-unsure")).await;
    }
    assert_eq!(
        after_stages("o", OUR_NODE, &sides[1].2),
        after_stages("k", KUBELET_NODE, &sides[0].2),
        "after the last stage: the calls our agent made (left) and the kubelet's (right)\n{}",
        two.kubelet_tail()
    );
    drop(drivers);
}

/// The names that differ between the two nodes' calls for `pod` of
/// `side` (its UID written in `dir` as `<pod>.uid`), its node's claim and
/// volume, the node and its root, and the staging directories of the
/// example driver (the handles' SHA-256), with their placeholders.
fn claim_pod_names(
    dir: &Path,
    pod: &str,
    side: &str,
    node: &str,
    root: &Path,
) -> Vec<(String, &'static str)> {
    let uid = std::fs::read_to_string(dir.join(format!("{pod}.uid"))).unwrap_or_default();
    let mut names = vec![
        (uid, "<UID>"),
        (pod.to_string(), "<POD>"),
        (root.display().to_string(), "<ROOT>"),
        (format!("pv-{side}"), "<PV>"),
        (format!("data-{side}"), "<PVC>"),
        (node.to_string(), "<NODE>"),
    ];
    let staged = root.join("plugins/kubernetes.io/csi/csi.example.com");
    for entry in std::fs::read_dir(staged).unwrap().flatten() {
        names.push((entry.file_name().to_string_lossy().into_owned(), "<SHA>"));
    }
    names
}

/// Waits until pod `name` is gone from the API.
async fn pod_gone(cluster: &Cluster, name: &str) {
    eventually(&format!("{name} gone"), LONG, || async {
        let answer = cluster
            .api
            .request(
                nodeplugins_test_support::kube_api::Identity::Admin,
                "GET",
                &format!("/api/v1/namespaces/default/pods/{name}"),
                None,
            )
            .await;
        (answer.status == 404).then_some(())
    })
    .await;
}

/// Waits until CSI driver `driver` registered on `node` (its Node has the
/// driver's node id).
async fn driver_registered(cluster: &Cluster, node: &str, driver: &str) {
    eventually(
        &format!("CSI driver {driver} registered on {node}"),
        LONG,
        || async {
            let n = cluster
                .api
                .admin("GET", &format!("/api/v1/nodes/{node}"), None)
                .await;
            n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
                .as_str()
                .is_some_and(|a| a.contains(driver))
                .then_some(())
        },
    )
    .await;
}

/// Runs a pod with a claim's volume (`data-k` on the kubelet's node,
/// `data-o` on ours) and one with the inline volume `inline` (if any), on both
/// nodes, then deletes them, one step at a time: each step
/// (`(kind, method, count)`: the pod of `kind` (`claim` or `inline`) made
/// at its kind's first step, deleted at the next,
/// until its driver's log in `dir` (`calls-k.jsonl`, `calls-o.jsonl`) has
/// `count` calls of `method`) ends with both drivers' calls compared. One
/// volume at a time: the kubelet sets up a pod's volumes in parallel, so
/// two of one pod would interleave their calls.
async fn claim_and_inline_calls_alike(
    two: &TwoNodes,
    dir: &Path,
    inline: Option<&Value>,
    steps: &[(&str, &str, usize)],
) {
    let cluster = &two.cluster;
    let sides = two.sides();
    let log_of = |side: &str| dir.join(format!("calls-{side}.jsonl"));
    let names_of = |side: &str, node: &str, root: &Path| -> Vec<(String, &'static str)> {
        let mut names = Vec::new();
        for kind in ["claim", "inline"] {
            let pod = format!("{side}-{kind}");
            let uid = std::fs::read_to_string(dir.join(format!("{pod}.uid"))).unwrap_or_default();
            names.push((
                uid,
                if kind == "claim" {
                    "<UID-CLAIM>"
                } else {
                    "<UID-INLINE>"
                },
            ));
            names.push((
                pod,
                if kind == "claim" {
                    "<POD-CLAIM>"
                } else {
                    "<POD-INLINE>"
                },
            ));
        }
        names.push((root.display().to_string(), "<ROOT>"));
        names.push((format!("pv-{side}"), "<PV>"));
        names.push((format!("data-{side}"), "<PVC>"));
        names.push((node.to_string(), "<NODE>"));
        names
    };
    for (step, (kind, until, count)) in steps.iter().enumerate() {
        // A kind's first step makes its pods, the next deletes them.
        let creating = !steps[..step].iter().any(|(k, ..)| k == kind);
        if creating {
            let volume = if *kind == "claim" {
                json!({"persistentVolumeClaim": {"claimName": "PVC"}})
            } else {
                inline
                    .expect("an inline volume for the inline steps")
                    .clone()
            };
            two.create_both(kind, |name, node, _| {
                let text = volume
                    .to_string()
                    .replace("PVC", &format!("data-{}", &name[..1]));
                csi_pod(name, node, serde_json::from_str(&text).unwrap())
            })
            .await;
        }
        for (side, ..) in &sides {
            let name = format!("{side}-{kind}");
            if creating {
                let pod = eventually(&format!("{name} running"), LONG, || async {
                    let pod = cluster.pod(&name).await;
                    (pod["status"]["phase"] == "Running").then_some(pod)
                })
                .await;
                let uid = pod["metadata"]["uid"].as_str().unwrap();
                std::fs::write(dir.join(format!("{name}.uid")), uid).unwrap();
            } else {
                cluster
                    .api
                    .admin(
                        "DELETE",
                        &format!("/api/v1/namespaces/default/pods/{name}"),
                        None,
                    )
                    .await;
            }
            eventually(&format!("{name}: {count} {until}"), LONG, || async {
                let calls = csi_calls(&log_of(side));
                (methods(&calls).iter().filter(|m| *m == until).count() >= *count).then_some(())
            })
            .await;
        }
        let theirs = normalized_calls(
            &csi_calls(&log_of("k")),
            &names_of("k", KUBELET_NODE, &sides[0].2),
        );
        let ours = normalized_calls(
            &csi_calls(&log_of("o")),
            &names_of("o", OUR_NODE, &sides[1].2),
        );
        assert_eq!(
            ours,
            theirs,
            "after the {kind} pods' {until}: the calls our agent made (left) and the kubelet's (right)\n{}",
            two.kubelet_tail()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attached_volume_is_waited_for_and_given_its_publish_context_as_the_real_kubelet_does() {
    // The attach/detach controller attaches the claimed volumes of each
    // node annotated for it (the kubelet annotates its own; our agent its
    // own), once the node says them in use; the test's attacher marks
    // each VolumeAttachment attached, as a driver's attacher would. Each
    // node has a volume of its own (`vol-k`, `vol-o`): one volume of a
    // driver is attached to one node at a time.
    let two = TwoNodes::start_with(1, &["persistentvolume-attach-detach-controller"]).await;
    let cluster = &two.cluster;
    let attacher = start_attacher(&cluster.api).await;
    let dir = TempDir::new().unwrap();
    let sides = two.sides();
    let log_of = |side: &str| dir.path().join(format!("calls-{side}.jsonl"));
    let mut drivers = Vec::new();
    for (side, node, root) in &sides {
        let state = dir.path().join(format!("state-{side}"));
        let handle = format!("vol-{side}");
        std::fs::create_dir_all(state.join(&handle)).unwrap();
        std::fs::write(state.join(&handle).join("hello"), "from the driver").unwrap();
        drivers.push(start_csi_driver(root, node, &state, &log_of(side), &[]));
        bind_static_volume(
            &cluster.api,
            &format!("data-{side}"),
            &format!("pv-{side}"),
            &handle,
        )
        .await;
    }
    create_csi_driver_object_with(&cluster.api, true).await;
    // Read while the volumes are staged: their staging directories'
    // names (the handles' SHA-256) are among the names.
    let names_of = |side: &str, node: &str, root: &Path| -> Vec<(String, &'static str)> {
        let mut names = claim_pod_names(dir.path(), &format!("{side}-attached"), side, node, root);
        names.push((format!("vol-{side}"), "<VOL>"));
        names
    };
    let mut names: Vec<Vec<(String, &'static str)>> = Vec::new();
    let compare = |when: &str, names: &[Vec<(String, &'static str)>]| {
        let theirs = normalized_calls(&csi_calls(&log_of("k")), &names[0]);
        let ours = normalized_calls(&csi_calls(&log_of("o")), &names[1]);
        assert_eq!(
            ours,
            theirs,
            "{when}: the calls our agent made (left) and the kubelet's (right)\n{}",
            two.kubelet_tail()
        );
        ours
    };

    two.create_claim_pods("attached").await;
    for (side, node, _) in &sides {
        let name = format!("{side}-attached");
        let pod = eventually(&format!("{name} running"), LONG, || async {
            let pod = cluster.pod(&name).await;
            (pod["status"]["phase"] == "Running").then_some(pod)
        })
        .await;
        std::fs::write(
            dir.path().join(format!("{name}.uid")),
            pod["metadata"]["uid"].as_str().unwrap(),
        )
        .unwrap();
        let shown = cluster
            .api
            .admin("GET", &format!("/api/v1/nodes/{node}"), None)
            .await;
        assert_eq!(
            shown["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
            "true",
            "{node}"
        );
        let unique = format!("kubernetes.io/csi/csi.example.com^vol-{side}");
        assert_eq!(shown["status"]["volumesInUse"], json!([unique]), "{node}");
        assert_eq!(
            shown["status"]["volumesAttached"][0]["name"],
            unique.as_str(),
            "{node}"
        );
    }
    for (side, node, root) in &sides {
        names.push(names_of(side, node, root));
    }
    let calls = compare("with the pods running", &names);
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("\"NodeStageVolume\"") && c.contains("/dev/attached/<PV>")),
        "the stage call has the attachment's metadata: {calls:#?}"
    );

    for (side, node, _) in &sides {
        let name = format!("{side}-attached");
        cluster
            .api
            .admin(
                "DELETE",
                &format!("/api/v1/namespaces/default/pods/{name}"),
                None,
            )
            .await;
        eventually(&format!("{name}'s volume unstaged"), LONG, || async {
            methods(&csi_calls(&log_of(side)))
                .iter()
                .any(|m| m == "NodeUnstageVolume")
                .then_some(())
        })
        .await;
        // No longer in use, the volume is detached: its VolumeAttachment
        // goes, and the Node no longer lists it attached.
        eventually(&format!("{node}'s volume detached"), LONG, || async {
            let shown = cluster
                .api
                .admin("GET", &format!("/api/v1/nodes/{node}"), None)
                .await;
            let attachments = cluster
                .api
                .admin("GET", "/apis/storage.k8s.io/v1/volumeattachments", None)
                .await;
            let on_node = attachments["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["spec"]["nodeName"] == *node)
                .count();
            (shown["status"]["volumesInUse"]
                .as_array()
                .is_none_or(Vec::is_empty)
                && shown["status"]["volumesAttached"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
                && on_node == 0)
                .then_some(())
        })
        .await;
    }
    compare("with the pods gone", &names);
    attacher.abort();
    drop(drivers);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grown_claim_is_grown_on_the_node_as_the_real_kubelet_grows_it() {
    // The test plays the external resizer: the claim gets the size asked
    // (`allocatedResources`) with `NodeResizePending`, then its volume the
    // new capacity. Each node then grows the volume in use (the driver
    // advertises EXPAND_VOLUME and records the size asked) and writes the
    // claim's new capacity. An update of each pod makes its node look at
    // once, as a kubelet syncs a pod when it changes.
    let two = TwoNodes::start(1).await;
    let cluster = &two.cluster;
    let dir = TempDir::new().unwrap();
    let sides = two.sides();
    let log_of = |side: &str| dir.path().join(format!("calls-{side}.jsonl"));
    let state_of = |side: &str| dir.path().join(format!("state-{side}"));
    let mut drivers = Vec::new();
    for (side, node, root) in &sides {
        std::fs::create_dir_all(state_of(side).join("vol-1")).unwrap();
        drivers.push(start_csi_driver(
            root,
            node,
            &state_of(side),
            &log_of(side),
            &["--expand"],
        ));
        bind_static_volume(
            &cluster.api,
            &format!("data-{side}"),
            &format!("pv-{side}"),
            "vol-1",
        )
        .await;
    }
    create_csi_driver_object(&cluster.api).await;
    two.create_claim_pods("grown").await;
    for (side, ..) in &sides {
        let name = format!("{side}-grown");
        let pod = eventually(&format!("{name} running"), LONG, || async {
            let pod = cluster.pod(&name).await;
            (pod["status"]["phase"] == "Running").then_some(pod)
        })
        .await;
        std::fs::write(
            dir.path().join(format!("{name}.uid")),
            pod["metadata"]["uid"].as_str().unwrap(),
        )
        .unwrap();
    }

    for (side, ..) in &sides {
        let claim = format!("/api/v1/namespaces/default/persistentvolumeclaims/data-{side}");
        cluster
            .api
            .admin(
                "PATCH",
                &format!("{claim}/status"),
                Some(&json!({"status": {
                    "allocatedResources": {"storage": "2Gi"},
                    "allocatedResourceStatuses": {"storage": "NodeResizePending"}}})),
            )
            .await;
        cluster
            .api
            .admin(
                "PATCH",
                &format!("/api/v1/persistentvolumes/pv-{side}"),
                Some(&json!({"spec": {"capacity": {"storage": "2Gi"}}})),
            )
            .await;
        cluster
            .api
            .admin(
                "PATCH",
                &format!("/api/v1/namespaces/default/pods/{side}-grown"),
                Some(&json!({"metadata": {"annotations": {"resized": "2Gi"}}})),
            )
            .await;
    }
    let mut statuses = Vec::new();
    for (side, node, _) in &sides {
        let claim = format!("/api/v1/namespaces/default/persistentvolumeclaims/data-{side}");
        let status = eventually(&format!("{node} grew data-{side}"), LONG, || async {
            let pvc = cluster.api.admin("GET", &claim, None).await;
            (pvc["status"]["capacity"]["storage"] == "2Gi").then(|| pvc["status"].clone())
        })
        .await;
        assert_eq!(
            std::fs::read_to_string(state_of(side).join("vol-1.size")).unwrap(),
            (2u64 << 30).to_string(),
            "{node}: the driver was asked for the new size"
        );
        statuses.push(status);
    }
    assert_eq!(
        statuses[1], statuses[0],
        "the claim's status as our agent left it (left) and as the kubelet did (right)"
    );
    assert!(
        statuses[0].get("allocatedResourceStatuses").is_none(),
        "the resize mark is cleared: {}",
        statuses[0]
    );

    let names_of = |side: &str, node: &str, root: &Path| {
        claim_pod_names(dir.path(), &format!("{side}-grown"), side, node, root)
    };
    let theirs = normalized_calls(
        &csi_calls(&log_of("k")),
        &names_of("k", KUBELET_NODE, &sides[0].2),
    );
    let ours = normalized_calls(
        &csi_calls(&log_of("o")),
        &names_of("o", OUR_NODE, &sides[1].2),
    );
    assert_eq!(
        ours,
        theirs,
        "the calls our agent made (left) and the kubelet's (right)\n{}",
        two.kubelet_tail()
    );
    assert!(
        ours.iter()
            .any(|c| c.starts_with("\"NodeExpandVolume\"") && c.contains("2147483648")),
        "{ours:#?}"
    );
    drop(drivers);
}

/// The keys of `value` (an object), sorted.
fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// (type, status, reason, message) of each condition of `node`, in order.
fn condition_rows(node: &Value) -> Vec<(String, String, String, String)> {
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    node["status"]["conditions"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|c| {
                    (
                        text(c, "type"),
                        text(c, "status"),
                        text(c, "reason"),
                        text(c, "message"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The real kubelet and our agent each register their Node on one API
/// server, each on a containerd of its own (with no CNI: neither network
/// is ready). The two Nodes have the same shape: label and annotation
/// keys, conditions with their statuses, reasons and messages, capacity
/// and allocatable keys and the machine's capacity, address types and
/// values but the host name, `nodeInfo` but the kubelet's version, and
/// the kubelet's runtime handlers and features.
/// Our agent for [`OUR_NODE`] under `root`, registering its Node and
/// running its pods on `containerd`, with `extra` flags.
fn registered_agent(
    api: &nodeplugins_test_support::kube_api::KubeApi,
    root: &Path,
    containerd: &Containerd,
    extra: &[&str],
) -> ChildProcess {
    let endpoint = containerd.endpoint();
    let mut args = vec![
        "--register-node",
        "on",
        "--container-runtime-endpoint",
        &endpoint,
    ];
    args.extend_from_slice(extra);
    common::kube::publishing_agent_as(&api.node_kubeconfig(), OUR_NODE, root, &args)
}

#[tokio::test(flavor = "multi_thread")]
async fn our_agent_registers_its_node_as_the_real_kubelet_registers_its_own() {
    nodeplugins_test_support::init_tracing();
    let api = nodeplugins_test_support::kube_api::KubeApi::start(OUR_NODE).await;
    let kubelet_containerd = Containerd::start().await;
    let kubelet_config = api.kubeconfig_of_node(KUBELET_NODE);
    let _kubelet = RealKubelet::start(KUBELET_NODE, &kubelet_config, &kubelet_containerd).await;
    let our_containerd = Containerd::start().await;
    let root = TempDir::new().unwrap();
    let _agent = registered_agent(&api, root.path(), &our_containerd, &[]);
    let registered = |node: &'static str| {
        let api = &api;
        async move {
            eventually(
                &format!("{node} registered, its runtime answered"),
                LONG,
                || async {
                    let answer = api
                        .request(
                            nodeplugins_test_support::kube_api::Identity::Admin,
                            "GET",
                            &format!("/api/v1/nodes/{node}"),
                            None,
                        )
                        .await;
                    let rows = condition_rows(&answer.body);
                    (answer.status == 200
                        && rows.iter().any(|r| {
                            r.0 == "Ready" && r.3.starts_with("container runtime network not ready")
                        }))
                    .then_some(answer.body)
                },
            )
            .await
        }
    };
    let theirs = registered(KUBELET_NODE).await;
    let ours = registered(OUR_NODE).await;

    let meta = |n: &Value, field: &str| keys(&n["metadata"][field]);
    assert_eq!(meta(&ours, "labels"), meta(&theirs, "labels"));
    assert_eq!(meta(&ours, "annotations"), meta(&theirs, "annotations"));
    assert_eq!(ours["spec"]["taints"], theirs["spec"]["taints"]);
    assert_eq!(condition_rows(&ours), condition_rows(&theirs));
    let status = |n: &Value, field: &str| n["status"][field].clone();
    assert_eq!(
        keys(&status(&ours, "capacity")),
        keys(&status(&theirs, "capacity"))
    );
    assert_eq!(
        keys(&status(&ours, "allocatable")),
        keys(&status(&theirs, "allocatable"))
    );
    // The same machine: the same capacity (the two roots are on one
    // filesystem).
    assert_eq!(status(&ours, "capacity"), status(&theirs, "capacity"));
    let addresses = |n: &Value| {
        n["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let kind = a["type"].as_str().unwrap().to_string();
                let value = if kind == "Hostname" {
                    String::new()
                } else {
                    a["address"].as_str().unwrap().to_string()
                };
                (kind, value)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(addresses(&ours), addresses(&theirs));
    let mut our_info = status(&ours, "nodeInfo");
    let mut their_info = status(&theirs, "nodeInfo");
    assert_eq!(our_info["kubeletVersion"], "v1.37.2");
    our_info["kubeletVersion"].take();
    their_info["kubeletVersion"].take();
    assert_eq!(our_info, their_info);
    assert_eq!(
        status(&ours, "runtimeHandlers"),
        status(&theirs, "runtimeHandlers")
    );
    assert_eq!(status(&ours, "features"), status(&theirs, "features"));
    assert_eq!(
        keys(&status(&ours, "daemonEndpoints")),
        keys(&status(&theirs, "daemonEndpoints"))
    );
}

/// The kubeconfig `path`, as JSON, its certificate directory `cert_dir`
/// written `<cert-dir>`.
fn kubeconfig_view(path: &Path, cert_dir: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.replace(&cert_dir.display().to_string(), "<cert-dir>");
    serde_yaml_ng::from_str(&text).unwrap()
}

/// The `kubelet-client-*` entries of `cert_dir`: each file's name with its
/// time as `<time>`, and where the current symlink points.
fn certificate_files(cert_dir: &Path) -> (BTreeSet<String>, String) {
    // A rotated certificate's file is named by the second it was written:
    // the two nodes' seconds differ, so the name is compared without it.
    let timeless = |name: &str| -> String {
        let stamp = name
            .strip_prefix("kubelet-client-")
            .and_then(|n| n.strip_suffix(".pem"))
            .filter(|t| t.len() == 19 && t.chars().filter(|c| *c == '-').count() == 5);
        match stamp {
            Some(_) => "kubelet-client-<time>.pem".to_string(),
            None => name.to_string(),
        }
    };
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(cert_dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("kubelet-client") {
            names.insert(timeless(&name));
        }
    }
    let target = std::fs::read_link(cert_dir.join("kubelet-client-current.pem")).unwrap();
    let file = target
        .file_name()
        .map(|f| timeless(&f.to_string_lossy()))
        .unwrap_or_default();
    let dir = match target.parent() {
        Some(parent) if parent == cert_dir => "<cert-dir>".to_string(),
        Some(parent) => parent.display().to_string(),
        None => String::new(),
    };
    (names, format!("{dir}/{file}"))
}

/// A CertificateSigningRequest of node `node`, what a node chooses in it:
/// how it is named, its signer and usages, who asked, how it ended.
fn csr_view(csr: &Value, node: &str) -> Value {
    let name = csr["metadata"]["name"].as_str().unwrap();
    let named = if name.starts_with("node-csr-") {
        format!("node-csr-<{} chars>", name.len() - "node-csr-".len())
    } else {
        format!(
            "{}<suffix>",
            csr["metadata"]["generateName"].as_str().unwrap_or("?")
        )
    };
    let mut groups: Vec<String> = csr["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_string())
        .collect();
    groups.sort();
    let approved: Vec<&str> = csr["status"]["conditions"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|c| c["reason"].as_str().unwrap_or(""))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "name": named,
        "signerName": csr["spec"]["signerName"],
        "usages": csr["spec"]["usages"],
        "expirationSeconds": csr["spec"]["expirationSeconds"],
        "username": csr["spec"]["username"].as_str().unwrap().replace(node, "<node>"),
        "groups": groups,
        "conditions": approved,
        "issued": csr["status"]["certificate"].is_string(),
    })
}

/// The certificate (PEM) a CertificateSigningRequest was issued.
fn certificate_of(csr: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(csr["status"]["certificate"].as_str().unwrap())
        .unwrap()
}

/// The subject of the first certificate in `pem`, as openssl prints it.
async fn subject_of(pem: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(pem).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Whether the certificate in `file` has expired (openssl's `-checkend 0`).
fn expired(file: &Path) -> bool {
    !std::process::Command::new("openssl")
        .args(["x509", "-noout", "-checkend", "0", "-in"])
        .arg(file)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread")]
async fn our_agent_bootstraps_and_rotates_its_client_certificate_as_the_real_kubelet_does() {
    nodeplugins_test_support::init_tracing();
    let api = nodeplugins_test_support::kube_api::KubeApi::start(OUR_NODE).await;
    api.allow_tls_bootstrap().await;
    let (ca_cert, ca_key) = api.client_ca_files();
    // Certificates of 30 s (the signer backdates them 5 min): each is past
    // 70 % of its life when issued, so both rotate at once, again and
    // again, and the first one expires while the test watches.
    let _control = nodeplugins_test_support::control_plane::ControlPlane::start_with_args(
        &api,
        &[
            "certificatesigningrequest-approving-controller",
            "certificatesigningrequest-signing-controller",
        ],
        &[
            &format!("--cluster-signing-cert-file={}", ca_cert.display()),
            &format!("--cluster-signing-key-file={}", ca_key.display()),
            "--cluster-signing-duration=30s",
        ],
    )
    .await;
    let bootstrap = api.bootstrap_kubeconfig();

    let kubelet_containerd = Containerd::start().await;
    let kubelet_files = TempDir::new().unwrap();
    let kubelet_conf = kubelet_files.path().join("kubelet.conf");
    let kubelet = RealKubelet::start_bootstrapping(
        KUBELET_NODE,
        &kubelet_conf,
        &bootstrap,
        &kubelet_containerd,
    )
    .await;
    let root = TempDir::new().unwrap();
    let our_conf = root.path().join("kubelet.conf");
    let our_certs = root.path().join("pki");
    let _agent = common::kube::publishing_agent_as(
        &our_conf,
        OUR_NODE,
        root.path(),
        &[
            "--bootstrap-kubeconfig",
            bootstrap.to_str().unwrap(),
            "--rotate-certificates",
            "on",
            "--cert-dir",
            our_certs.to_str().unwrap(),
            "--register-node",
            "on",
        ],
    );

    // Each node's requests: its bootstrap one and its first renewal.
    let csrs = |node: &'static str| {
        let api = &api;
        async move {
            eventually(
                &format!("{node}: bootstrapped, then renewed"),
                LONG,
                || async {
                    let all = api
                        .admin(
                            "GET",
                            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
                            None,
                        )
                        .await;
                    let issued: Vec<&Value> = all["items"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|c| c["status"]["certificate"].is_string())
                        .collect();
                    let mut bootstrap = None;
                    for csr in &issued {
                        if csr["spec"]["username"]
                            .as_str()
                            .is_some_and(|u| u.starts_with("system:bootstrap:"))
                            && subject_of(&certificate_of(csr))
                                .await
                                .contains(&format!("CN=system:node:{node},"))
                        {
                            bootstrap = Some((*csr).clone());
                        }
                    }
                    let bootstrap = bootstrap?;
                    let renewal = issued
                        .iter()
                        .find(|c| c["spec"]["username"] == format!("system:node:{node}"))
                        .map(|c| (*c).clone())?;
                    Some((bootstrap, renewal))
                },
            )
            .await
        }
    };
    // Two bootstraps on one bootstrap token: each request is the node's
    // by the common name it asks for. With rotation on, the first request
    // is named by the API server as every later one (`csr-...`).
    let (their_bootstrap, their_renewal) = csrs(KUBELET_NODE).await;
    let (our_bootstrap, our_renewal) = csrs(OUR_NODE).await;
    for (theirs, ours) in [
        (&their_bootstrap, &our_bootstrap),
        (&their_renewal, &our_renewal),
    ] {
        assert_eq!(csr_view(ours, OUR_NODE), csr_view(theirs, KUBELET_NODE));
        assert_eq!(
            subject_of(&certificate_of(ours)).await,
            subject_of(&certificate_of(theirs))
                .await
                .replace(KUBELET_NODE, OUR_NODE),
        );
    }
    assert_eq!(
        subject_of(&certificate_of(&our_bootstrap)).await,
        format!("subject=CN=system:node:{OUR_NODE},O=system:nodes")
    );

    // The kubeconfig each wrote, and the files of each certificate
    // directory.
    assert_eq!(
        kubeconfig_view(&our_conf, &our_certs),
        kubeconfig_view(&kubelet_conf, &kubelet.cert_dir())
    );
    assert_eq!(
        kubeconfig_view(&our_conf, &our_certs)["users"][0]["user"]["client-certificate"],
        "<cert-dir>/kubelet-client-current.pem"
    );
    assert_eq!(
        certificate_files(&our_certs),
        certificate_files(&kubelet.cert_dir())
    );

    // The bootstrap certificate expires; the agent goes on with the ones
    // it rotated to: its Lease is renewed after that.
    let first = root.path().join("first.pem");
    std::fs::write(&first, certificate_of(&our_bootstrap)).unwrap();
    eventually("the bootstrap certificate expired", LONG, || async {
        expired(&first).then_some(())
    })
    .await;
    let since = OffsetDateTime::now_utc();
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{OUR_NODE}");
    eventually(
        "our Lease renewed with a rotated certificate",
        LONG,
        || async {
            let lease = api.admin("GET", &path, None).await;
            let renewed = lease["spec"]["renewTime"]
                .as_str()
                .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())?;
            (renewed > since).then_some(())
        },
    )
    .await;
    assert!(
        !our_certs.join("kubelet-client.key.tmp").exists(),
        "the bootstrap's key file is gone once its certificate is stored"
    );
}

/// The node's resolver file both nodes are given.
const NODE_RESOLV_CONF: &str = "nameserver 192.0.2.53\nnameserver 192.0.2.54\n\
    search corp.example lab.example.\noptions ndots:2 timeout:1\n";

/// A host-network busybox pod `name` bound to `node`, printing its
/// resolver file and ending, with `dns` (its `dnsPolicy` and `dnsConfig`).
fn resolver_pod(name: &str, node: &str, dns: Value) -> Value {
    let mut spec = json!({
        "nodeName": node,
        "hostNetwork": true,
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{
            "name": "main", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", "echo BEGIN; cat /etc/resolv.conf; echo END"],
        }],
    });
    for (key, value) in dns.as_object().unwrap() {
        spec[key] = value.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// What pod `name`'s container printed of its resolver file, each
/// `options` line's words sorted (the kubelet merges options through a Go
/// map, in no fixed order).
async fn resolver_file(
    api: &nodeplugins_test_support::kube_api::KubeApi,
    name: &str,
    logs: &Path,
) -> Vec<String> {
    let pod = eventually(&format!("{name} succeeded"), LONG, || async {
        let pod = api
            .admin(
                "GET",
                &format!("/api/v1/namespaces/default/pods/{name}"),
                None,
            )
            .await;
        (pod["status"]["phase"] == "Succeeded").then_some(pod)
    })
    .await;
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let log = logs.join(format!("default_{name}_{uid}/main/0.log"));
    let lines = eventually(&format!("{name}'s resolver file"), LONG, || async {
        let lines = cri_log_lines(&log);
        lines.iter().any(|l| l == "END").then_some(lines)
    })
    .await;
    let begin = lines.iter().position(|l| l == "BEGIN").unwrap();
    let end = lines.iter().position(|l| l == "END").unwrap();
    lines[begin + 1..end]
        .iter()
        .map(|line| match line.strip_prefix("options ") {
            Some(options) => {
                let mut words: Vec<&str> = options.split_whitespace().collect();
                words.sort_unstable();
                format!("options {}", words.join(" "))
            }
            None => line.clone(),
        })
        .collect()
}

/// The Warnings on pod `name`, as `REASON: MESSAGE`, sorted.
async fn warnings_on(api: &nodeplugins_test_support::kube_api::KubeApi, name: &str) -> Vec<String> {
    let events = api
        .admin("GET", "/api/v1/namespaces/default/events", None)
        .await;
    let mut found: Vec<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["type"] == "Warning")
        .map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            )
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_resolver_file_on_our_agent_is_what_the_real_kubelet_gives() {
    nodeplugins_test_support::init_tracing();
    let api = nodeplugins_test_support::kube_api::KubeApi::start(OUR_NODE).await;
    api.ensure_default_service_account("default").await;
    let dir = TempDir::new().unwrap();
    let resolv_conf = dir.path().join("resolv.conf");
    std::fs::write(&resolv_conf, NODE_RESOLV_CONF).unwrap();

    let kubelet_containerd = Containerd::start().await;
    let kubelet_config = api.kubeconfig_of_node(KUBELET_NODE);
    let kubelet = RealKubelet::start_configured(
        KUBELET_NODE,
        &kubelet_config,
        &kubelet_containerd,
        &format!(
            "clusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\nresolvConf: {}\n",
            resolv_conf.display()
        ),
    )
    .await;
    let our_containerd = Containerd::start().await;
    let root = TempDir::new().unwrap();
    let our_logs = dir.path().join("agent-pod-logs");
    let _agent = registered_agent(
        &api,
        root.path(),
        &our_containerd,
        &[
            "--pod-logs-dir",
            our_logs.to_str().unwrap(),
            "--cluster-dns",
            "10.96.0.10",
            "--cluster-domain",
            "cluster.local",
            "--resolv-conf",
            resolv_conf.to_str().unwrap(),
        ],
    );

    let own_config = json!({
        "nameservers": ["192.0.2.1"],
        "searches": ["own.example", "corp.example"],
        "options": [{"name": "ndots", "value": "3"}, {"name": "rotate"}],
    });
    let cases = [
        ("cluster", json!({"dnsPolicy": "ClusterFirstWithHostNet"})),
        ("host", json!({"dnsPolicy": "ClusterFirst"})),
        (
            "default",
            json!({"dnsPolicy": "Default", "dnsConfig": own_config}),
        ),
        (
            "cluster-own",
            json!({"dnsPolicy": "ClusterFirstWithHostNet", "dnsConfig": own_config}),
        ),
        (
            "none",
            json!({"dnsPolicy": "None", "dnsConfig": {
                "nameservers": ["192.0.2.1", "192.0.2.2", "192.0.2.3"],
                "searches": ["own.example"]}}),
        ),
        // The node's two and the pod's two: one more than a resolver takes.
        (
            "cut",
            json!({"dnsPolicy": "Default", "dnsConfig": {
                "nameservers": ["192.0.2.1", "192.0.2.2"]}}),
        ),
    ];
    for (name, dns) in &cases {
        for (prefix, node) in [("k", KUBELET_NODE), ("o", OUR_NODE)] {
            let pod = resolver_pod(&format!("{prefix}-{name}"), node, dns.clone());
            api.admin("POST", "/api/v1/namespaces/default/pods", Some(&pod))
                .await;
        }
    }
    for (name, _) in &cases {
        let theirs = resolver_file(&api, &format!("k-{name}"), &kubelet.pod_logs()).await;
        let ours = resolver_file(&api, &format!("o-{name}"), &our_logs).await;
        assert_eq!(ours, theirs, "{name}'s /etc/resolv.conf");
        assert!(
            !theirs.is_empty(),
            "{name}: the kubelet's pod printed nothing"
        );
    }
    // The cut name servers are told on the pod, in the same words.
    let theirs = eventually("the kubelet's DNSConfigForming Warning", LONG, || async {
        let found = warnings_on(&api, "k-cut").await;
        (!found.is_empty()).then_some(found)
    })
    .await;
    let ours = eventually("our DNSConfigForming Warning", LONG, || async {
        let found = warnings_on(&api, "o-cut").await;
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(ours, theirs);
    assert!(theirs[0].starts_with("DNSConfigForming: "), "{theirs:?}");
}

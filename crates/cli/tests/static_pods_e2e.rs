//! Static pods on our agent and on the real kubelet, side by side against
//! one real kube-apiserver, each node with its own containerd: the same
//! manifest in each node's static pod path runs as a pod whose mirror pod
//! the API shows alike (its spec, annotations, owner and status); a mirror
//! pod deleted is made again with the pod left running; a changed manifest
//! is a new pod; a manifest removed takes its pod and mirror pod away.
//!
//! The real kubelet takes a machine-wide lock, so these run one at a time
//! with the other tests that start it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::pods::LONG;
use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::real_kubelet::RealKubelet;
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;

const KUBELET_NODE: &str = "kubelet-node";
const OUR_NODE: &str = "agent-node";

/// The manifest of static pod `web`, labelled `version`.
fn manifest(version: &str) -> String {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "kube-system", "labels": {"version": version}},
        "spec": {
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "web",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "exec sleep 3600"],
            }],
        },
    });
    serde_json::to_string_pretty(&pod).unwrap()
}

/// Writes `text` as `dir`'s manifest through a temporary file, as tools
/// write manifests.
fn write_manifest(dir: &Path, text: &str) {
    let temporary = dir.join(".web.json.tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, dir.join("web.json")).unwrap();
}

/// Our agent on `root`, registering its node, running pods on
/// `containerd` (their logs under `dir`) and the static pods of
/// `manifests`.
fn our_agent(
    api: &KubeApi,
    root: &Path,
    containerd: &Containerd,
    dir: &Path,
    manifests: &Path,
) -> nodeplugins_test_support::process::ChildProcess {
    let endpoint = containerd.endpoint();
    let logs = dir.join("pod-logs");
    common::kube::publishing_agent_as(
        &api.node_kubeconfig(),
        OUR_NODE,
        root,
        &[
            "--register-node",
            "on",
            "--container-runtime-endpoint",
            &endpoint,
            "--pod-logs-dir",
            logs.to_str().unwrap(),
            "--static-pod-path",
            manifests.to_str().unwrap(),
        ],
    )
}

/// Mirror pod `web-<node>` as the API shows it, when `pred` holds for it.
async fn mirror_when(
    api: &KubeApi,
    node: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/api/v1/namespaces/kube-system/pods/web-{node}");
    eventually(&format!("{node}'s mirror pod {what}"), LONG, || async {
        let response = api.request(Identity::Admin, "GET", &path, None).await;
        (response.status == 200 && pred(&response.body)).then_some(response.body)
    })
    .await
}

/// Whether mirror pod `pod` shows its container running.
fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && pod["status"]["containerStatuses"][0]["ready"] == true
}

fn annotation<'a>(pod: &'a Value, key: &str) -> &'a str {
    pod["metadata"]["annotations"][key].as_str().unwrap_or("")
}

/// What of mirror pod `pod` of `node` is the same on every node: its
/// node's name written as NODE, the values that differ by node or by run
/// (UIDs, hashes, times, addresses, container ids) left out.
fn shape(pod: &Value, node: &str) -> Value {
    let text = serde_json::to_string(pod).unwrap().replace(node, "NODE");
    let mut pod: Value = serde_json::from_str(&text).unwrap();
    let metadata = pod["metadata"].as_object_mut().unwrap();
    for key in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        metadata.remove(key);
    }
    let annotations = metadata["annotations"].as_object_mut().unwrap();
    for key in [
        "kubernetes.io/config.hash",
        "kubernetes.io/config.mirror",
        "kubernetes.io/config.seen",
    ] {
        assert!(annotations.remove(key).is_some(), "{key} on {text}");
    }
    for owner in metadata["ownerReferences"].as_array_mut().unwrap() {
        owner.as_object_mut().unwrap().remove("uid");
    }
    let status = pod["status"].as_object_mut().unwrap();
    for key in ["startTime", "hostIP", "hostIPs", "podIP", "podIPs"] {
        status.remove(key);
    }
    for condition in status["conditions"].as_array_mut().unwrap() {
        condition
            .as_object_mut()
            .unwrap()
            .remove("lastTransitionTime");
    }
    for container in status["containerStatuses"].as_array_mut().unwrap() {
        let container = container.as_object_mut().unwrap();
        for key in ["containerID", "imageID", "state", "user", "volumeMounts"] {
            container.remove(key);
        }
    }
    pod
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_pod_and_its_mirror_pod_on_our_agent_are_the_real_kubelets() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(OUR_NODE).await;
    let dir = TempDir::new().unwrap();
    let kubelet_manifests = dir.path().join("kubelet-manifests");
    let our_manifests = dir.path().join("our-manifests");
    for manifests in [&kubelet_manifests, &our_manifests] {
        std::fs::create_dir(manifests).unwrap();
        write_manifest(manifests, &manifest("1"));
    }
    let kubelet_containerd = Containerd::start().await;
    let _kubelet = RealKubelet::start_configured(
        KUBELET_NODE,
        &api.kubeconfig_of_node(KUBELET_NODE),
        &kubelet_containerd,
        &format!(
            "staticPodPath: {}\nfileCheckFrequency: 20s\n",
            kubelet_manifests.display()
        ),
    )
    .await;
    let our_containerd = Containerd::start().await;
    let root = TempDir::new().unwrap();
    let _agent = our_agent(
        &api,
        root.path(),
        &our_containerd,
        dir.path(),
        &our_manifests,
    );

    // The static pod runs, and its mirror pod shows it alike.
    let theirs = mirror_when(&api, KUBELET_NODE, "running", running).await;
    let ours = mirror_when(&api, OUR_NODE, "running", running).await;
    assert_eq!(
        serde_json::to_string_pretty(&shape(&ours, OUR_NODE)).unwrap(),
        serde_json::to_string_pretty(&shape(&theirs, KUBELET_NODE)).unwrap()
    );
    for (pod, node) in [(&ours, OUR_NODE), (&theirs, KUBELET_NODE)] {
        let hash = annotation(pod, "kubernetes.io/config.hash");
        assert_eq!(annotation(pod, "kubernetes.io/config.mirror"), hash);
        assert_eq!(annotation(pod, "kubernetes.io/config.source"), "file");
        assert_ne!(
            pod["metadata"]["uid"], hash,
            "the API gives the mirror a UID of its own"
        );
        let node_object = api
            .admin("GET", &format!("/api/v1/nodes/{node}"), None)
            .await;
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["uid"],
            node_object["metadata"]["uid"]
        );
    }

    // A mirror pod deleted is made again; the pod runs on, untouched.
    let container = |pod: &Value| pod["status"]["containerStatuses"][0]["containerID"].clone();
    for (pod, node) in [(&ours, OUR_NODE), (&theirs, KUBELET_NODE)] {
        api.admin(
            "DELETE",
            &format!("/api/v1/namespaces/kube-system/pods/web-{node}"),
            None,
        )
        .await;
        let before = pod["metadata"]["uid"].clone();
        let again = mirror_when(&api, node, "made again", |p| {
            p["metadata"]["uid"] != before
                && p["metadata"]["deletionTimestamp"].is_null()
                && running(p)
        })
        .await;
        assert_eq!(
            container(&again),
            container(pod),
            "{node}'s container ran on"
        );
        assert_eq!(again["status"]["containerStatuses"][0]["restartCount"], 0);
    }

    // A changed manifest is another pod: its mirror pod is replaced.
    for manifests in [&kubelet_manifests, &our_manifests] {
        write_manifest(manifests, &manifest("2"));
    }
    let mut replaced = Vec::new();
    for (pod, node) in [(&ours, OUR_NODE), (&theirs, KUBELET_NODE)] {
        let hash = annotation(pod, "kubernetes.io/config.hash").to_string();
        let new = mirror_when(&api, node, "replaced", |p| {
            annotation(p, "kubernetes.io/config.hash") != hash
                && p["metadata"]["labels"]["version"] == "2"
                && running(p)
        })
        .await;
        assert_ne!(container(&new), container(pod), "{node}'s pod started anew");
        replaced.push(new);
    }
    assert_eq!(
        serde_json::to_string_pretty(&shape(&replaced[0], OUR_NODE)).unwrap(),
        serde_json::to_string_pretty(&shape(&replaced[1], KUBELET_NODE)).unwrap()
    );

    // A manifest removed takes its pod and mirror pod away.
    for manifests in [&kubelet_manifests, &our_manifests] {
        std::fs::remove_file(manifests.join("web.json")).unwrap();
    }
    for node in [OUR_NODE, KUBELET_NODE] {
        let path = format!("/api/v1/namespaces/kube-system/pods/web-{node}");
        eventually(&format!("{node}'s mirror pod gone"), LONG, || async {
            let response = api.request(Identity::Admin, "GET", &path, None).await;
            (response.status == 404).then_some(())
        })
        .await;
    }
    eventually("our node's containers gone", LONG, || async {
        let out = our_containerd
            .ctr(&["-n", "k8s.io", "containers", "ls", "-q"])
            .await;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .is_empty()
            .then_some(())
    })
    .await;
}

/// The runtime's tasks that run, as `ctr` lists them.
async fn running_tasks(containerd: &Containerd) -> usize {
    let out = containerd.ctr(&["-n", "k8s.io", "tasks", "ls"]).await;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.contains("RUNNING"))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_pod_runs_while_the_api_server_does_not_answer_and_gets_its_mirror_pod_after() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(OUR_NODE).await;
    let dir = TempDir::new().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    write_manifest(&manifests, &manifest("1"));
    // The API server hangs, as one that is not up yet (the static pod
    // could be the API server itself).
    api.pause_apiserver().await;
    let containerd = Containerd::start().await;
    let root = TempDir::new().unwrap();
    let _agent = our_agent(&api, root.path(), &containerd, dir.path(), &manifests);
    // Its sandbox and its container run.
    eventually(
        "the static pod's sandbox and container running",
        LONG,
        || async { (running_tasks(&containerd).await >= 2).then_some(()) },
    )
    .await;
    api.resume_apiserver().await;
    let mirror = mirror_when(&api, OUR_NODE, "running", running).await;
    assert_eq!(mirror["metadata"]["labels"]["version"], "1");
    assert_eq!(mirror["status"]["containerStatuses"][0]["restartCount"], 0);
}

//! The agent runs its pods on a real containerd (`--container-runtime-endpoint`),
//! with the SDK's example device plugin and DRA driver, under a real API
//! server, scheduler and controller-manager:
//!
//! - a pod's container sees its device plugin's environment, device node,
//!   mount and CDI device and its claim's CDI edits; the pod is Running in
//!   the API with the kubelet's status; deleted with a 5 s grace period
//!   while its container ignores SIGTERM, it keeps its device and claim
//!   until the container is gone, then both are given back and the pod
//!   object is removed;
//! - a crashing container is restarted with the crash-loop back-off, with
//!   PreStartContainer before each start;
//! - the agent killed (SIGKILL) and started again adopts the running
//!   containers with no plugin call; containerd killed and started again
//!   changes nothing either;
//! - after a reboot (containerd's containers and state gone, the boot id
//!   changed; or the same with the boot id unchanged: the sandbox is gone),
//!   the pod's device is allocated and its claim prepared again, and its
//!   container made again;
//! - a Job runs to completion and a Deployment to its ready replicas;
//! - a pod's volumes (a configMap, a downwardAPI, a memory emptyDir) show
//!   their ConfigMap's change at the next resync, stay as they are across
//!   an agent's restart, nothing mounted twice; deleted
//!   while the agent is away, the pod's volumes are torn down when it comes
//!   back, and so are the volumes another kubelet left of a pod gone;
//! - a pod's CSI volumes (a claim's, staged then published; an inline one,
//!   published) from the SDK's example driver, registered by the CSI
//!   registrar: the kubelet's calls in its order, the container sees the
//!   driver's files, resyncs and an agent restart call nothing again;
//!   deleted while the driver is down, the pod stays until the driver is
//!   back and its volumes are unpublished and unstaged; a publish the
//!   driver does not finish in time keeps the volume's marks, and the pod
//!   deleted before it ran gets the volume unpublished all the same.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::pods::*;
use nodeplugins::runtime::{ContainerRuntime, ContainerState, CriRuntime, RuntimeMetrics};
use nodeplugins_test_support::containerd::{Containerd, cri_log_lines};
use nodeplugins_test_support::kube_api::Identity;
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;

const NODE: &str = "node-rt";

/// A node of `cluster` whose agent runs pods on `containerd`, with `devices`
/// devices and `gpus` GPUs; pods' logs under `logs`.
async fn runtime_node(
    cluster: &Cluster,
    containerd: &Containerd,
    logs: &Path,
    devices: usize,
    gpus: usize,
) -> Node {
    runtime_node_with(cluster, containerd, logs, devices, gpus, &[]).await
}

/// [`runtime_node`], the agent given `more` flags.
async fn runtime_node_with(
    cluster: &Cluster,
    containerd: &Containerd,
    logs: &Path,
    devices: usize,
    gpus: usize,
    more: &[&str],
) -> Node {
    std::fs::create_dir_all("/var/run/example-device").unwrap();
    containerd.write_example_cdi_spec(RESOURCE, devices);
    let endpoint = containerd.endpoint();
    let mut args = vec![
        "--container-runtime-endpoint",
        endpoint.as_str(),
        "--pod-logs-dir",
        logs.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    Node::start_full(
        cluster,
        NODE,
        devices,
        gpus,
        &args,
        Some(&containerd.cdi_dir()),
    )
    .await
}

/// A busybox container running `script`, with `devices` devices and
/// `claims`.
fn busybox(name: &str, devices: usize, claims: &[&str], script: &str) -> Value {
    let mut c = container(name, devices, claims);
    c["image"] = json!(BUSYBOX);
    c["imagePullPolicy"] = json!("IfNotPresent");
    c["command"] = json!(["sh", "-c", script]);
    c
}

/// The pod `name` as the API has it, once `pred` holds.
async fn api_pod_when(
    cluster: &Cluster,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    eventually(&format!("pod {name} {what}"), LONG, || async {
        let pod = cluster.pod(name).await;
        pred(&pod).then_some(pod)
    })
    .await
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|all| all.iter().all(|c| c["ready"] == true))
}

fn container_id(pod: &Value, index: usize) -> String {
    pod["status"]["containerStatuses"][index]["containerID"]
        .as_str()
        .unwrap()
        .strip_prefix("containerd://")
        .unwrap()
        .to_string()
}

async fn gone(cluster: &Cluster, name: &str) -> bool {
    let path = format!("{PODS}/{name}");
    cluster
        .api
        .request(Identity::Admin, "GET", &path, None)
        .await
        .status
        == 404
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_runs_with_its_devices_and_gives_them_back_only_once_its_container_is_gone() {
    let cluster = Cluster::start(&[NODE]).await;
    let containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    let node = runtime_node(&cluster, &containerd, logs.path(), 2, 1).await;
    let cri = CriRuntime::new(
        &containerd.endpoint(),
        Duration::from_secs(30),
        RuntimeMetrics::default(),
    )
    .unwrap();

    cluster.claim("gpu").await;
    let script = "env; ls /dev; ls /var/run; echo ready; while true; do sleep 1; done";
    let mut pod = with_claims(
        pod("web", NODE, vec![busybox("main", 1, &["gpu"], script)]),
        vec![named_claim("gpu", "gpu")],
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(5);
    cluster.create(&pod).await;

    let pod = api_pod_when(&cluster, "web", "Running and ready", running).await;
    let status = &pod["status"];
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "True")
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    for wanted in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert!(types.contains(&wanted), "{wanted} in {status}");
    }
    assert_eq!(status["containerStatuses"][0]["restartCount"], 0);
    assert!(status["startTime"].is_string(), "{status}");
    assert_eq!(node.allocate_calls(), 1);
    assert_eq!(
        node.pre_start_calls(),
        1,
        "PreStartContainer before the start"
    );
    assert_eq!(node.prepare_calls(), 1);

    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let log = logs
        .path()
        .join(format!("default_web_{uid}"))
        .join("main/0.log");
    let lines = eventually("the container's output", LONG, || async {
        let lines = cri_log_lines(&log);
        lines.iter().any(|l| l == "ready").then_some(lines)
    })
    .await;
    let device = lines
        .iter()
        .find_map(|l| l.strip_prefix("EXAMPLE_DEVICES="))
        .unwrap_or_else(|| panic!("the plugin's environment in {lines:?}"))
        .to_string();
    for wanted in [
        format!("EXAMPLE_CDI_{}=on", device.replace('-', "_").to_uppercase()),
        "EXAMPLE_GPU_0=on".to_string(),
        device.clone(),
        "example-device".to_string(),
    ] {
        assert!(lines.contains(&wanted), "{wanted} in {lines:?}");
    }

    // Deleted with its 5 s grace period; its shell, the container's first
    // process, ignores SIGTERM: it runs until killed at the end of it.
    let id = container_id(&pod, 0);
    cluster
        .api
        .admin("DELETE", &format!("{PODS}/web"), None)
        .await;
    let seen_running = std::sync::atomic::AtomicUsize::new(0);
    eventually("the pod object removed by the agent", LONG, || async {
        let state = cri.container_status(&id).await.map(|c| c.state).ok();
        let container_runs = state == Some(ContainerState::Running);
        let (allocated, claims) = node.held().await;
        let unprepared = node.unprepare_calls();
        if container_runs {
            seen_running.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(allocated, 1, "the device is kept while the container runs");
            assert_eq!(claims, 1, "the claim is kept while the container runs");
            assert_eq!(unprepared, 0, "no unprepare while the container runs");
        }
        gone(&cluster, "web").await.then_some(())
    })
    .await;
    assert!(
        seen_running.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the container ran on after the deletion"
    );
    assert_eq!(node.held().await, (0, 0));
    assert_eq!(node.unprepare_calls(), 1);
    let ended = cri.container_status(&id).await;
    // Removed with its sandbox, or killed when the grace period ran out.
    if let Ok(ended) = ended {
        assert_eq!(ended.exit_code, Some(137), "{ended:?}");
    }
    assert!(
        cri.sandboxes()
            .await
            .unwrap()
            .iter()
            .all(|s| s.pod.uid != uid),
        "the sandbox is removed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashing_container_restarts_with_back_off_and_pre_start_container_before_each_start() {
    let cluster = Cluster::start(&[NODE]).await;
    let containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    let node = runtime_node(&cluster, &containerd, logs.path(), 1, 0).await;
    cluster
        .create(&pod(
            "crash",
            NODE,
            vec![busybox("main", 1, &[], "echo once; exit 3")],
        ))
        .await;
    let pod = api_pod_when(
        &cluster,
        "crash",
        "in CrashLoopBackOff after a restart",
        |p| {
            let c = &p["status"]["containerStatuses"][0];
            c["restartCount"].as_u64().unwrap_or(0) >= 1
                && c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        },
    )
    .await;
    let c = &pod["status"]["containerStatuses"][0];
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 3, "{c}");
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error", "{c}");
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 10s restarting failed container=main pod=crash_default("),
        "{c}"
    );
    assert_eq!(pod["status"]["phase"], "Running", "restartPolicy Always");
    let restarts = c["restartCount"].as_u64().unwrap() as usize;
    assert_eq!(node.allocate_calls(), 1, "allocated once, at admission");
    assert_eq!(
        node.pre_start_calls(),
        restarts + 1,
        "one PreStartContainer per start"
    );
    // After the back-off it starts again.
    api_pod_when(&cluster, "crash", "restarted after its back-off", |p| {
        p["status"]["containerStatuses"][0]["restartCount"]
            .as_u64()
            .unwrap_or(0)
            > restarts as u64
    })
    .await;
    cluster.delete("crash").await;
    eventually("the device given back", LONG, || async {
        (node.held().await == (0, 0)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_or_containerd_killed_and_started_again_leaves_the_running_containers_alone() {
    let cluster = Cluster::start(&[NODE]).await;
    let mut containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    let mut node = runtime_node(&cluster, &containerd, logs.path(), 1, 1).await;
    cluster.claim("gpu").await;
    let pod = with_claims(
        pod(
            "steady",
            NODE,
            vec![busybox("main", 1, &["gpu"], "while true; do sleep 1; done")],
        ),
        vec![named_claim("gpu", "gpu")],
    );
    cluster.create(&pod).await;
    let before = api_pod_when(&cluster, "steady", "Running", running).await;
    let id = container_id(&before, 0);
    let calls = (
        node.allocate_calls(),
        node.pre_start_calls(),
        node.prepare_calls(),
    );
    assert_eq!(calls, (1, 1, 1));

    node.kill_agent().await;
    node.start_agent().await;
    // The new agent's worker wrote the pod's status once it synced it.
    node.pod_when("steady", "running again", |p| p["pod_phase"] == "Running")
        .await;
    let after = cluster.pod("steady").await;
    assert_eq!(container_id(&after, 0), id, "the same container runs");
    assert_eq!(after["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(
        (
            node.allocate_calls(),
            node.pre_start_calls(),
            node.prepare_calls()
        ),
        calls,
        "no plugin call after the agent's restart"
    );

    containerd.kill().await;
    containerd.restart().await;
    let cri = CriRuntime::new(
        &containerd.endpoint(),
        Duration::from_secs(30),
        RuntimeMetrics::default(),
    )
    .unwrap();
    let state = eventually("containerd back", LONG, || async {
        cri.container_status(&id).await.ok().map(|c| c.state)
    })
    .await;
    assert_eq!(
        state,
        ContainerState::Running,
        "the container outlived containerd"
    );
    let after = cluster.pod("steady").await;
    assert_eq!(container_id(&after, 0), id);
    assert_eq!(after["status"]["phase"], "Running");
    assert_eq!(
        (
            node.allocate_calls(),
            node.pre_start_calls(),
            node.prepare_calls()
        ),
        calls
    );

    // The agent reached containerd again: the deletion stops the container.
    cluster.delete("steady").await;
    eventually(
        "the container stopped and everything given back",
        LONG,
        || async {
            let stopped = cri
                .container_status(&id)
                .await
                .map_or(true, |c| c.state == ContainerState::Exited);
            (stopped && node.held().await == (0, 0)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_completes_and_a_deployment_gets_its_ready_replicas() {
    let controllers = [
        "job-controller",
        "deployment-controller",
        "replicaset-controller",
    ];
    let cluster = Cluster::start_with(&[NODE], &controllers).await;
    let containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    let node = runtime_node(&cluster, &containerd, logs.path(), 2, 0).await;
    let template = |name: &str, script: &str, policy: &str| {
        let mut spec = pod(name, NODE, vec![busybox("main", 1, &[], script)]);
        spec["spec"]["restartPolicy"] = json!(policy);
        spec["spec"]["terminationGracePeriodSeconds"] = json!(2);
        spec["metadata"] = json!({"labels": {"app": name}});
        spec
    };

    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {"backoffLimit": 0, "template": template("once", "echo done", "Never")},
    });
    cluster
        .api
        .admin("POST", "/apis/batch/v1/namespaces/default/jobs", Some(&job))
        .await;
    eventually("the Job complete", LONG, || async {
        let job = cluster
            .api
            .admin("GET", "/apis/batch/v1/namespaces/default/jobs/once", None)
            .await;
        (job["status"]["succeeded"] == 1).then_some(())
    })
    .await;

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template("web", "while true; do sleep 1; done", "Always"),
        },
    });
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    cluster
        .api
        .admin("POST", deployments, Some(&deployment))
        .await;
    eventually("the Deployment's two replicas ready", LONG, || async {
        let d = cluster
            .api
            .admin("GET", &format!("{deployments}/web"), None)
            .await;
        (d["status"]["readyReplicas"] == 2 && d["status"]["availableReplicas"] == 2).then_some(())
    })
    .await;
    // Scaled to zero: its pods are stopped, given back and removed.
    let scale = json!({"spec": {"replicas": 0}});
    let answer = cluster
        .api
        .request(
            Identity::Admin,
            "PATCH",
            &format!("{deployments}/web"),
            Some(&scale),
        )
        .await;
    assert!(answer.status == 200, "{}", answer.body);
    eventually("the Deployment's pods gone", LONG, || async {
        let pods = cluster
            .api
            .admin("GET", &format!("{PODS}?labelSelector=app%3Dweb"), None)
            .await;
        pods["items"].as_array().unwrap().is_empty().then_some(())
    })
    .await;
    eventually("everything given back", LONG, || async {
        (node.held().await == (0, 0)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_reboot_devices_are_allocated_and_claims_prepared_again_before_containers_are_made_again()
 {
    let cluster = Cluster::start(&[NODE]).await;
    let mut containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    let mut node = runtime_node(&cluster, &containerd, logs.path(), 1, 1).await;
    cluster.claim("gpu").await;
    let script = "env; echo ready; while true; do sleep 1; done";
    let pod = with_claims(
        pod("survivor", NODE, vec![busybox("main", 1, &["gpu"], script)]),
        vec![named_claim("gpu", "gpu")],
    );
    cluster.create(&pod).await;
    let before = api_pod_when(&cluster, "survivor", "Running", running).await;
    let id = container_id(&before, 0);
    assert_eq!(
        (
            node.allocate_calls(),
            node.pre_start_calls(),
            node.prepare_calls()
        ),
        (1, 1, 1)
    );
    let prepared_before = prepared_at(&node).await;

    // The node goes down and comes back: the agent and every container
    // gone, containerd's state with them, the kernel's boot id new (here:
    // the one the agent recorded is another).
    node.kill_agent().await;
    containerd.reboot().await;
    std::fs::write(node.root().join("nodeplugins/boot-id"), "a-boot-before").unwrap();
    node.start_agent().await;

    let after = api_pod_when(&cluster, "survivor", "running a new container", |p| {
        running(p) && container_id(p, 0) != id
    })
    .await;
    assert_eq!(
        (node.allocate_calls(), node.pre_start_calls()),
        (2, 2),
        "Allocate and PreStartContainer again"
    );
    // The driver answers from its own record (it did not reboot here), so
    // the agent's record tells that NodePrepareResources was called.
    assert!(
        prepared_at(&node).await > prepared_before,
        "NodePrepareResources again"
    );
    let uid = after["metadata"]["uid"].as_str().unwrap();
    let restart = after["status"]["containerStatuses"][0]["restartCount"]
        .as_u64()
        .unwrap();
    let log = logs
        .path()
        .join(format!("default_survivor_{uid}"))
        .join(format!("main/{restart}.log"));
    eventually("the new container's output", LONG, || async {
        let lines = cri_log_lines(&log);
        (lines.iter().any(|l| l == "ready")
            && lines.iter().any(|l| l.starts_with("EXAMPLE_DEVICES=")))
        .then_some(())
    })
    .await;
    // The runtime's state wiped with the same boot: the pod's sandbox is
    // gone, which tells the same.
    let id = container_id(&cluster.pod("survivor").await, 0);
    let prepared_before = prepared_at(&node).await;
    node.kill_agent().await;
    containerd.reboot().await;
    node.start_agent().await;
    api_pod_when(&cluster, "survivor", "running a third container", |p| {
        running(p) && container_id(p, 0) != id
    })
    .await;
    assert_eq!((node.allocate_calls(), node.pre_start_calls()), (3, 3));
    assert!(prepared_at(&node).await > prepared_before);

    cluster.delete("survivor").await;
    eventually("everything given back", LONG, || async {
        (node.held().await == (0, 0)).then_some(())
    })
    .await;
}

/// When the node's one claim was last prepared, as the agent recorded it.
async fn prepared_at(node: &Node) -> u64 {
    let out = common::cli(node.root(), &["dra", "claims", "-o", "json"]).await;
    let claims: Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = claims["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0]["prepared"], true, "{claims:?}");
    claims[0]["prepared_at_unix_ms"].as_u64().unwrap()
}

/// The mounts of the host whose mount point is under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.display().to_string();
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|point| point.starts_with(&dir))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_volumes_survive_an_agent_restart_and_go_with_the_pod_even_deleted_while_it_is_away()
{
    let cluster = Cluster::start(&[NODE]).await;
    let containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    // Resynced every second or so, for a ConfigMap's change to show soon.
    let mut node = runtime_node_with(
        &cluster,
        &containerd,
        logs.path(),
        1,
        0,
        &["--sync-frequency", "1s"],
    )
    .await;
    cluster
        .api
        .admin(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"level": "3"}})),
        )
        .await;
    let mut main = busybox(
        "main",
        0,
        &[],
        "cat /v/cfg/level; echo; cat /v/down/name; echo; echo ready; \
         while true; do echo \"level $(cat /v/cfg/level)\"; sleep 1; done",
    );
    main["volumeMounts"] = json!([
        {"name": "cfg", "mountPath": "/v/cfg"},
        {"name": "down", "mountPath": "/v/down"},
        {"name": "mem", "mountPath": "/v/mem"},
    ]);
    let mut steady = pod("steady", NODE, vec![main]);
    steady["spec"]["hostNetwork"] = json!(true);
    steady["spec"]["volumes"] = json!([
        {"name": "cfg", "configMap": {"name": "settings"}},
        {"name": "down", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "mem", "emptyDir": {"medium": "Memory"}},
    ]);
    cluster.create(&steady).await;
    let before = api_pod_when(&cluster, "steady", "Running", running).await;
    let uid = before["metadata"]["uid"].as_str().unwrap().to_string();
    let id = container_id(&before, 0);
    let pod_dir = node.root().join("pods").join(&uid);
    let log = logs
        .path()
        .join(format!("default_steady_{uid}"))
        .join("main/0.log");
    let lines = eventually("the container's output", LONG, || async {
        let lines = cri_log_lines(&log);
        lines.iter().any(|l| l == "ready").then_some(lines)
    })
    .await;
    assert_eq!(
        lines[..2],
        ["3".to_string(), "steady".to_string()],
        "{lines:?}"
    );
    // `nodeplugins pods steady` shows each volume, its kind and its path.
    let row = node
        .pod_when("steady", "showing its volumes", |p| {
            p["volumes"].as_array().is_some_and(|v| v.len() == 3)
        })
        .await;
    assert_eq!(row["volumes"][2]["kind"], "emptyDir", "{row}");
    assert_eq!(
        row["volumes"][2]["path"],
        pod_dir
            .join("volumes/kubernetes.io~empty-dir/mem")
            .display()
            .to_string()
    );
    // The ConfigMap changed: its volume shows it at the next resync.
    cluster
        .api
        .admin(
            "PUT",
            "/api/v1/namespaces/default/configmaps/settings",
            Some(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"level": "4"}})),
        )
        .await;
    eventually("the ConfigMap's change in the container", LONG, || async {
        cri_log_lines(&log)
            .iter()
            .any(|l| l == "level 4")
            .then_some(())
    })
    .await;
    let mounted = mounts_under(&pod_dir);
    assert_eq!(
        mounted.len(),
        2,
        "the downwardAPI volume and the memory emptyDir are tmpfs mounts: {mounted:?}"
    );

    node.kill_agent().await;
    node.start_agent().await;
    node.pod_when("steady", "running again", |p| p["pod_phase"] == "Running")
        .await;
    assert_eq!(container_id(&cluster.pod("steady").await, 0), id);
    assert_eq!(
        mounts_under(&pod_dir),
        mounted,
        "set up again in place: nothing mounted twice"
    );

    // Deleted while the agent is away; and volumes another kubelet left of
    // a pod the API does not have, one of them a tmpfs.
    node.kill_agent().await;
    cluster.delete("steady").await;
    let left = node.root().join("pods/0f0f0f0f-left-by-a-kubelet");
    let left_volume = left.join("volumes/kubernetes.io~empty-dir/cache");
    std::fs::create_dir_all(&left_volume).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&left_volume)
        .status()
        .unwrap();
    assert!(status.success());
    node.start_agent().await;
    eventually("the gone pods' volumes torn down", LONG, || async {
        (mounts_under(&pod_dir).is_empty()
            && mounts_under(&left).is_empty()
            && !pod_dir.join("volumes").exists()
            && !left.join("volumes").exists())
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csi_driver_stages_and_publishes_a_pods_volumes_once_and_unpublishes_them_only_when_it_can()
 {
    let cluster = Cluster::start(&[NODE]).await;
    let containerd = Containerd::start().await;
    let logs = TempDir::new().unwrap();
    let driver_dir = TempDir::new().unwrap();
    let state = driver_dir.path().join("state");
    let calls_log = driver_dir.path().join("calls.jsonl");
    let mut node = runtime_node_with(
        &cluster,
        &containerd,
        logs.path(),
        1,
        0,
        &["--sync-frequency", "1s", "--volume-stats-agg-period", "1s"],
    )
    .await;
    let mut csi = Some(start_csi_driver(node.root(), NODE, &state, &calls_log, &[]));
    node.wait_node(&cluster, "the CSI driver's node id on the Node", |n| {
        n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
            .as_str()
            .is_some_and(|a| a.contains("csi.example.com"))
    })
    .await;
    let api = &cluster.api;
    create_csi_driver_object(api).await;
    bind_static_volume(api, "data", "pv-data", "vol-1").await;
    // What the driver's volume holds before any pod.
    std::fs::create_dir_all(state.join("vol-1")).unwrap();
    std::fs::write(state.join("vol-1/hello"), "from the driver").unwrap();

    let mut main = busybox(
        "main",
        0,
        &[],
        "cat /data/hello; echo; echo inline > /scratch/x && echo ready; \
         trap 'exit 0' TERM; while true; do sleep 1; done",
    );
    main["volumeMounts"] = json!([
        {"name": "data", "mountPath": "/data"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]);
    let mut reader = pod("reader", NODE, vec![main]);
    reader["spec"]["hostNetwork"] = json!(true);
    reader["spec"]["volumes"] = json!([
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "csi": {"driver": "csi.example.com", "volumeAttributes": {"size": "1Mi"}}},
    ]);
    cluster.create(&reader).await;
    let running_pod = api_pod_when(&cluster, "reader", "Running", running).await;
    let uid = running_pod["metadata"]["uid"].as_str().unwrap().to_string();
    let id = container_id(&running_pod, 0);
    let log = logs
        .path()
        .join(format!("default_reader_{uid}"))
        .join("main/0.log");
    let lines = eventually("the container's output", LONG, || async {
        let lines = cri_log_lines(&log);
        lines.iter().any(|l| l == "ready").then_some(lines)
    })
    .await;
    assert_eq!(lines[0], "from the driver", "{lines:?}");

    // The kubelet's layout, and its calls in its order: the claim's volume
    // staged (capabilities asked before each step), then published; the
    // inline volume published straight.
    let root = node.root().to_path_buf();
    let pod_dir = root.join("pods").join(&uid);
    let published = pod_dir.join("volumes/kubernetes.io~csi/pv-data/mount");
    let inline = pod_dir.join("volumes/kubernetes.io~csi/scratch/mount");
    assert_eq!(mounts_under(&pod_dir), {
        let mut both = vec![
            published.display().to_string(),
            inline.display().to_string(),
        ];
        both.sort();
        both
    });
    let data: Value = serde_json::from_str(
        &std::fs::read_to_string(pod_dir.join("volumes/kubernetes.io~csi/pv-data/vol_data.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(data["specVolID"], "pv-data");
    assert_eq!(data["volumeHandle"], "vol-1");
    assert_eq!(data["volumeLifecycleMode"], "Persistent");
    assert_eq!(data["nodeName"], NODE);
    let calls = csi_calls(&calls_log);
    assert_eq!(
        methods(&calls),
        [
            "NodeGetCapabilities",
            "NodeGetCapabilities",
            "NodeGetCapabilities",
            "NodeStageVolume",
            "NodeGetCapabilities",
            "NodeGetCapabilities",
            "NodeGetCapabilities",
            "NodePublishVolume",
            "NodeGetCapabilities",
            "NodeGetCapabilities",
            "NodePublishVolume",
        ],
        "{calls:#?}"
    );
    let stage = &calls[3]["request"];
    let staging = stage["staging_target_path"].as_str().unwrap();
    assert!(
        staging.starts_with(&format!(
            "{}/plugins/kubernetes.io/csi/csi.example.com/",
            root.display()
        )),
        "{stage}"
    );
    assert!(staging.ends_with("/globalmount"), "{stage}");
    assert_eq!(
        stage["volume_capability"]["access_mode"],
        "SINGLE_NODE_WRITER"
    );
    assert_eq!(
        stage["volume_capability"]["access_type"]["mount"]["fs_type"],
        "ext4"
    );
    assert_eq!(
        stage["volume_capability"]["access_type"]["mount"]["mount_flags"],
        json!(["noatime"])
    );
    assert_eq!(
        stage["volume_context"],
        json!({"kind": "static"}),
        "no pod info when staging"
    );
    let publish = &calls[7]["request"];
    assert_eq!(publish["target_path"], published.display().to_string());
    assert_eq!(publish["staging_target_path"], staging);
    assert_eq!(publish["readonly"], false);
    assert_eq!(
        publish["volume_context"]["csi.storage.k8s.io/pod.name"],
        "reader"
    );
    assert_eq!(
        publish["volume_context"]["csi.storage.k8s.io/pod.uid"],
        uid.as_str()
    );
    assert_eq!(
        publish["volume_context"]["csi.storage.k8s.io/ephemeral"],
        "false"
    );
    assert_eq!(publish["volume_context"]["kind"], "static");
    let tokens: Value = serde_json::from_str(
        publish["volume_context"]["csi.storage.k8s.io/serviceAccount.tokens"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(
        tokens["csi.example.com"]["token"]
            .as_str()
            .is_some_and(|t| t.split('.').count() == 3),
        "a service-account token for the driver's audience: {tokens}"
    );
    assert!(
        tokens["csi.example.com"]["expirationTimestamp"].is_string(),
        "{tokens}"
    );
    let ephemeral = &calls[10]["request"];
    assert_eq!(ephemeral["staging_target_path"], "");
    assert_eq!(
        ephemeral["volume_context"]["csi.storage.k8s.io/ephemeral"],
        "true"
    );
    assert_eq!(ephemeral["volume_context"]["size"], "1Mi");
    assert_eq!(
        ephemeral["volume_capability"]["access_type"]["mount"]["mount_flags"],
        json!([])
    );
    assert!(ephemeral["volume_id"].as_str().unwrap().starts_with("csi-"));
    assert!(
        Path::new(staging)
            .parent()
            .unwrap()
            .join("vol_data.json")
            .is_file()
    );

    // Resyncs (every second here) and a restart of the agent publish
    // nothing again that still is.
    let resynced = node
        .pod_when("reader", "its volumes shown", |p| {
            p["volumes"].as_array().is_some_and(|v| v.len() == 2)
        })
        .await;
    assert_eq!(
        resynced["volumes"][0]["kind"], "persistentVolumeClaim",
        "{resynced}"
    );
    // The claim's volume's usage, read from the driver, as the kubelet's
    // gauges (the inline volume has no claim: none).
    let metrics = eventually("the claim's volume stats", LONG, || async {
        let status = common::status_json(node.root()).await?;
        let (_, metrics) = common::http_get(status["metrics_addr"].as_str()?, "/metrics").await;
        metrics
            .contains("kubelet_volume_stats_capacity_bytes{namespace=\"default\",persistentvolumeclaim=\"data\"}")
            .then_some(metrics)
    })
    .await;
    for gauge in [
        "available_bytes",
        "used_bytes",
        "inodes",
        "inodes_free",
        "inodes_used",
    ] {
        assert!(
            metrics.contains(&format!("kubelet_volume_stats_{gauge}{{namespace=\"default\",persistentvolumeclaim=\"data\"}}")),
            "{gauge}: {metrics}"
        );
    }
    assert_eq!(
        metrics
            .matches("kubelet_volume_stats_capacity_bytes{")
            .count(),
        1,
        "{metrics}"
    );
    // Every driver call timed, as the kubelet's CSI client times it.
    for method in ["NodeStageVolume", "NodePublishVolume", "NodeGetVolumeStats"] {
        let labels = format!(
            "csi_operations_seconds_count{{driver_name=\"csi.example.com\",method_name=\"/csi.v1.Node/{method}\",grpc_status_code=\"OK\",migrated=\"false\"}}"
        );
        assert!(metrics.contains(&labels), "{labels}: {metrics}");
    }

    node.kill_agent().await;
    node.start_agent().await;
    node.pod_when("reader", "running again", |p| p["pod_phase"] == "Running")
        .await;
    eventually("a resync after the restart", LONG, || async {
        let row = node.pod_when("reader", "listed", |_| true).await;
        row["volumes"]
            .as_array()
            .is_some_and(|v| v.len() == 2)
            .then_some(())
    })
    .await;
    assert_eq!(container_id(&cluster.pod("reader").await, 0), id);
    assert_eq!(
        methods(&csi_calls(&calls_log)).len(),
        11,
        "no call after the first publishes"
    );

    // Deleted while its driver is down: the pod stays until its volumes
    // are unpublished.
    let (mut driver, mut registrar) = csi.take().unwrap();
    common::signal(&registrar, "-TERM").await;
    registrar.wait(LONG).await;
    common::signal(&driver, "-KILL").await;
    driver.wait(LONG).await;
    let answer = api
        .request(
            Identity::Admin,
            "DELETE",
            &format!("{PODS}/reader?gracePeriodSeconds=2"),
            None,
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    eventually("the container stopped", LONG, || async {
        let out = containerd.ctr(&["-n", "k8s.io", "tasks", "ls"]).await;
        (!String::from_utf8_lossy(&out.stdout).contains(&id)).then_some(())
    })
    .await;
    let row = node
        .pod_when("reader", "unable to unpublish", |p| {
            p["message"]
                .as_str()
                .is_some_and(|e| e.contains("not found in the list of registered CSI drivers"))
        })
        .await;
    assert!(
        !gone(&cluster, "reader").await,
        "the pod waits for its volumes: {row}"
    );
    assert!(published.exists() && inline.exists());

    let (mut driver, mut registrar) = start_csi_driver(node.root(), NODE, &state, &calls_log, &[]);
    eventually("the pod gone once its volumes are", LONG, || async {
        gone(&cluster, "reader").await.then_some(())
    })
    .await;
    assert!(!pod_dir.join("volumes").exists());
    assert!(
        !Path::new(staging).parent().unwrap().exists(),
        "unstaged and its directory removed"
    );
    let after: Vec<String> = methods(&csi_calls(&calls_log))
        .into_iter()
        .skip(11)
        .collect();
    // Volume by volume, as found on disk: the claim's unpublished, then
    // unstaged (its last pod gone), then the inline one unpublished.
    assert_eq!(
        after,
        [
            "NodeUnpublishVolume",
            "NodeGetCapabilities",
            "NodeUnstageVolume",
            "NodeUnpublishVolume",
        ],
        "{after:?}"
    );
    assert!(
        !state
            .join(ephemeral["volume_id"].as_str().unwrap())
            .exists(),
        "the inline volume went with its pod"
    );
    assert_eq!(
        std::fs::read_to_string(state.join("vol-1/hello")).unwrap(),
        "from the driver"
    );

    // A driver that does not answer a publish in time may still be at work
    // on it: the volume's marks stay, and the pod, deleted before it ever
    // ran, gets the volume unpublished all the same.
    common::signal(&registrar, "-TERM").await;
    registrar.wait(LONG).await;
    common::signal(&driver, "-KILL").await;
    driver.wait(LONG).await;
    let _failing = start_csi_driver(
        node.root(),
        NODE,
        &state,
        &calls_log,
        &["--fail=NodePublishVolume=DeadlineExceeded"],
    );
    let before = csi_calls(&calls_log).len();
    let mut main = busybox("main", 0, &[], "sleep 3600");
    main["volumeMounts"] = json!([{"name": "scratch", "mountPath": "/scratch"}]);
    let mut unsure = pod("unsure", NODE, vec![main]);
    unsure["spec"]["hostNetwork"] = json!(true);
    unsure["spec"]["volumes"] = json!([
        {"name": "scratch", "csi": {"driver": "csi.example.com"}},
    ]);
    cluster.create(&unsure).await;
    eventually("a publish the driver did not finish", LONG, || async {
        csi_calls(&calls_log)[before..]
            .iter()
            .any(|c| {
                c["method"] == "NodePublishVolume"
                    && c["error"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("DeadlineExceeded"))
            })
            .then_some(())
    })
    .await;
    let uid = cluster.pod("unsure").await["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let volume_dir = root
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~csi/scratch");
    assert!(
        volume_dir.join("vol_data.json").is_file(),
        "an unfinished publish keeps its marks"
    );
    let answer = api
        .request(
            Identity::Admin,
            "DELETE",
            &format!("{PODS}/unsure?gracePeriodSeconds=2"),
            None,
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    eventually(
        "the pod gone once its volume is unpublished",
        LONG,
        || async { gone(&cluster, "unsure").await.then_some(()) },
    )
    .await;
    let target = volume_dir.join("mount").display().to_string();
    let calls = csi_calls(&calls_log);
    assert!(
        calls[before..]
            .iter()
            .any(|c| c["method"] == "NodeUnpublishVolume"
                && c["request"]["target_path"] == target.as_str()),
        "{calls:#?}"
    );
    assert!(!volume_dir.exists());
}

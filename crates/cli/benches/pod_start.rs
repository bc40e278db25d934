//! A pod's containers started, from its binding to the API showing it
//! Running with every container ready: our agent against the real kubelet
//! v1.37.2 (built by `interop/`), in one run, under one API server, each
//! node on a containerd of its own (`shared/spec/runtime.md`).
//!
//! Each pod runs one busybox container in the host's network (no CNI
//! here) that sleeps until SIGTERM. No scheduler runs: the timing starts
//! when the benchmark sends the binding, and ends when a watch of the
//! pods shows the pod `Running` with every container ready (the node's
//! status write as the API serves it), on the machine's one clock.
//!
//! Two scenarios: one pod at a time (alternating which node goes first),
//! and 50 pods bound at once, three times on each node, taking turns. And
//! the floor both stand on: the runtime's part of one pod's start alone
//! (RunPodSandbox, ImageStatus, CreateContainer, StartContainer through
//! our CRI client, no agent, no API).
//! While the first 50 run on a node and nothing changes, its agent's
//! resident memory and the CPU time it uses over 10 s are read from
//! `/proc`.
//!
//! Then the same with the volume every real pod has: the
//! `kube-api-access-*` projected volume the API server adds (its
//! service-account token from the TokenRequest API, the `kube-root-ca.crt`
//! ConfigMap, the namespace), one pod at a time and 50 at once on each
//! node, with the API requests each node sent per pod of the burst
//! (`apiserver_request_total`, the bindings left out). And then with a
//! CSI volume besides: an inline volume of the SDK's example CSI driver
//! (one on each node, registered by the CSI registrar, its volumes bind
//! mounts), published before the sandbox is made.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench pod_start` (builds the Go
//! programs of `interop/` and installs Debian's runc first where missing,
//! as the tests do).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use nodeplugins::runtime::{
    ContainerRuntime, ContainerSpec, CriRuntime, PodIdentity, PullPolicy, RUNTIME_REQUEST_TIMEOUT,
    RuntimeMetrics, SandboxSpec,
};
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi, bind};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::real_kubelet::RealKubelet;
use nodeplugins_test_support::stats::{latencies, percentiles_ms, process_usage as usage};
use serde_json::json;
use tokio::process::Command;
use tokio::time::Instant;

const OURS: &str = "start-ours";
const REFERENCE: &str = "start-kubelet";
const PODS: &str = "/api/v1/namespaces/default/pods";
/// Pods started one at a time on each node.
const ROUNDS: usize = 20;
/// How many times [`BURST`] pods are bound at once on each node.
const BURSTS: usize = 3;
const BURST: usize = 50;
const TIMEOUT: Duration = Duration::from_secs(180);
/// How long a node with [`BURST`] running pods is watched doing nothing.
const IDLE: Duration = Duration::from_secs(10);

/// When each pod was first seen `Running` with every container ready, as
/// a watch of the namespace's pods shows it.
#[derive(Clone, Default)]
struct Running(Arc<Mutex<BTreeMap<String, SystemTime>>>);

impl Running {
    /// Follows the pods of `api` from now on.
    fn follow(api: Api<Pod>) -> Self {
        let running = Self::default();
        let seen = running.clone();
        tokio::spawn(async move {
            loop {
                let list = api.list_metadata(&ListParams::default()).await.unwrap();
                let version = list.metadata.resource_version.unwrap_or_default();
                let mut events = api
                    .watch(&WatchParams::default().timeout(290), &version)
                    .await
                    .unwrap()
                    .boxed();
                while let Some(Ok(event)) = events.next().await {
                    let (WatchEvent::Added(pod) | WatchEvent::Modified(pod)) = event else {
                        continue;
                    };
                    if is_running(&pod) {
                        let at = SystemTime::now();
                        let name = pod.metadata.name.unwrap_or_default();
                        seen.0.lock().unwrap().entry(name).or_insert(at);
                    }
                }
            }
        });
        running
    }

    /// When each of `names` was first seen running, once all were.
    async fn all(&self, names: &[String]) -> BTreeMap<String, SystemTime> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            {
                let seen = self.0.lock().unwrap();
                if names.iter().all(|n| seen.contains_key(n)) {
                    return names.iter().map(|n| (n.clone(), seen[n])).collect();
                }
            }
            assert!(Instant::now() < deadline, "{names:?} never all running");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn is_running(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    status.phase.as_deref() == Some("Running")
        && !containers.is_empty()
        && containers.iter().all(|c| c.ready)
}

/// Pod `name`, not bound yet, with its API access volume (`api_access`)
/// or none, and an inline volume of the example CSI driver (`csi`) or none.
async fn unbound_pod(api: &KubeApi, name: &str, api_access: bool, csi: bool) {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": api_access,
            "hostNetwork": true,
            "terminationGracePeriodSeconds": 2,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
            }],
        },
    });
    if csi {
        pod["spec"]["volumes"] = json!([{"name": "data",
            "csi": {"driver": "csi.example.com", "volumeAttributes": {"size": "1Mi"}}}]);
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
    }
    api.admin("POST", PODS, Some(&pod)).await;
}

/// Latencies by node.
type ByNode = BTreeMap<&'static str, Vec<Duration>>;

/// Pods with their API access volume (and an inline CSI volume, `csi`):
/// `ROUNDS / 2` one at a time on each node, taking turns at going first,
/// then `BURST` at once on each; the latencies of both, and the API
/// requests each node sent per pod of its burst (the bindings left out).
/// Pods are named `<prefix>-<node>-<round>` and `<prefix>-burst-<node>-<i>`.
async fn with_volumes(
    api: &KubeApi,
    pods: &Api<Pod>,
    running: &Running,
    nodes: [(&'static str, &Containerd, u32); 2],
    prefix: &str,
    csi: bool,
) -> (ByNode, ByNode, BTreeMap<&'static str, String>) {
    let mut one: ByNode = BTreeMap::new();
    for round in 0..ROUNDS / 2 {
        let order = if round % 2 == 0 {
            [nodes[0], nodes[1]]
        } else {
            [nodes[1], nodes[0]]
        };
        for (node, containerd, _) in order {
            let name = vec![format!("{prefix}-{node}-{round}")];
            unbound_pod(api, &name[0], true, csi).await;
            let sent = [(name[0].clone(), bind(pods, &name[0], node).await)].into();
            let ready = running.all(&name).await;
            one.entry(node)
                .or_default()
                .extend(latencies(&sent, &ready));
            delete_all(api, containerd, &name).await;
        }
    }
    let mut burst: ByNode = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for (node, containerd, _) in nodes {
        let names: Vec<String> = (0..BURST)
            .map(|i| format!("{prefix}-burst-{node}-{i:02}"))
            .collect();
        for name in &names {
            unbound_pod(api, name, true, csi).await;
        }
        let before = api.request_counts().await;
        let binds = names
            .iter()
            .map(|name| async move { (name.clone(), bind(pods, name, node).await) });
        let sent: BTreeMap<String, SystemTime> =
            futures::future::join_all(binds).await.into_iter().collect();
        let ready = running.all(&names).await;
        let after = api.request_counts().await;
        let ignore = [("POST pods/binding", BURST as f64)];
        requests.insert(node, after.since(&before, &ignore).per(BURST as f64));
        burst
            .entry(node)
            .or_default()
            .extend(latencies(&sent, &ready));
        delete_all(api, containerd, &names).await;
    }
    (one, burst, requests)
}

/// The SDK's example CSI driver serving volumes under `state` on the node
/// whose state is under `root`, registered there by the CSI registrar.
fn csi_driver(root: &std::path::Path, node: &str, state: &std::path::Path) -> [ChildProcess; 2] {
    let socket = root.join("plugins/csi.example.com/csi.sock");
    let mut driver = Command::new(binary("nodeplugins-sdk-bins", "example-csi-driver"));
    driver
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg(format!("--node-id={node}"))
        .arg(format!("--state-dir={}", state.display()));
    let registry = root.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let mut registrar = Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"));
    registrar
        .arg(format!("--csi-address={}", socket.display()))
        .arg(format!("--kubelet-registration-path={}", socket.display()))
        .arg(format!("--plugin-registration-path={}", registry.display()));
    [
        ChildProcess::spawn("example-csi-driver", driver),
        ChildProcess::spawn("nodeplugins-csi-registrar", registrar),
    ]
}

/// Deletes `names` as a user does (their grace period), and returns once
/// the API has none of them and `containerd` runs no task (container or
/// sandbox): the node is idle again.
async fn delete_all(api: &KubeApi, containerd: &Containerd, names: &[String]) {
    for name in names {
        api.admin("DELETE", &format!("{PODS}/{name}"), None).await;
    }
    let deadline = Instant::now() + TIMEOUT;
    for name in names {
        while api
            .request(Identity::Admin, "GET", &format!("{PODS}/{name}"), None)
            .await
            .status
            != 404
        {
            assert!(Instant::now() < deadline, "{name} never removed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    loop {
        let out = containerd.ctr(&["tasks", "ls"]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        if !text.lines().any(|l| l.contains("RUNNING")) {
            return;
        }
        assert!(Instant::now() < deadline, "tasks still running: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resident memory (KiB) and CPU time over [`IDLE`] of process `pid`.
async fn idle_usage(pid: u32) -> (u64, Duration) {
    let (_, cpu_before) = usage(pid);
    tokio::time::sleep(IDLE).await;
    let (rss, cpu_after) = usage(pid);
    (rss, cpu_after.saturating_sub(cpu_before))
}

/// The runtime's own part of a pod start, with no agent: through our CRI
/// client, the sandbox made, the image found, the container created and
/// started, `rounds` times on `containerd` (each pod stopped and removed
/// before the next).
async fn runtime_alone(
    containerd: &Containerd,
    logs: &std::path::Path,
    rounds: usize,
) -> Vec<Duration> {
    let runtime = CriRuntime::new(
        &containerd.endpoint(),
        RUNTIME_REQUEST_TIMEOUT,
        RuntimeMetrics::default(),
    )
    .unwrap();
    let mut took = Vec::new();
    for round in 0..rounds {
        let uid = format!("floor-{round}");
        let sandbox = SandboxSpec {
            pod: PodIdentity {
                namespace: "default".into(),
                name: uid.clone(),
                uid: uid.clone(),
            },
            log_directory: logs.join(&uid).display().to_string(),
            ..SandboxSpec::default()
        };
        std::fs::create_dir_all(&sandbox.log_directory).unwrap();
        let container = ContainerSpec {
            name: "main".into(),
            image: BUSYBOX.into(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "trap 'exit 0' TERM; sleep 3600 & wait".into(),
            ],
            log_path: "main/0.log".into(),
            ..ContainerSpec::default()
        };
        let start = Instant::now();
        let sandbox_id = runtime.run_sandbox(&sandbox).await.unwrap();
        let image = runtime
            .ensure_image(BUSYBOX, PullPolicy::IfNotPresent, &sandbox)
            .await
            .unwrap();
        let id = runtime
            .create_container(&sandbox_id, &sandbox, &container, &image)
            .await
            .unwrap();
        runtime.start_container(&id).await.unwrap();
        took.push(start.elapsed());
        runtime
            .stop_container(&id, Duration::from_secs(2))
            .await
            .unwrap();
        runtime.stop_sandbox(&sandbox_id).await.unwrap();
        runtime.remove_sandbox(&sandbox_id).await.unwrap();
    }
    took
}

#[tokio::main]
async fn main() {
    let api = KubeApi::start(OURS).await;
    api.create_schedulable_node(OURS).await;
    api.ensure_default_service_account("default").await;
    let client = api.client(Identity::Admin).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let running = Running::follow(pods.clone());

    // The kubelet's node.
    let kubelet_containerd = Containerd::start().await;
    let kubelet = RealKubelet::start(
        REFERENCE,
        &api.kubeconfig_of_node(REFERENCE),
        &kubelet_containerd,
    )
    .await;

    // Our node, with the address the kubelet found for its own (the same
    // machine's).
    let our_containerd = Containerd::start().await;
    let root = tempfile::tempdir().unwrap();
    let mut agent_command = Command::new(binary("nodeplugins-cli", "nodeplugins"));
    agent_command
        .args(["run", "--metrics-addr", "off", "--log-level", "warn"])
        .arg("--root-dir")
        .arg(root.path())
        .arg("--kubeconfig")
        .arg(api.kubeconfig_of_node(OURS))
        .args(["--node-name", OURS])
        .args(["--container-runtime-endpoint", &our_containerd.endpoint()])
        .arg("--pod-logs-dir")
        .arg(root.path().join("pod-logs"));
    let agent = ChildProcess::spawn("nodeplugins run", agent_command);
    let deadline = Instant::now() + TIMEOUT;
    let kubelet_node = loop {
        let answer = api
            .request(
                Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{REFERENCE}"),
                None,
            )
            .await;
        if answer.status == 200 && answer.body["status"]["addresses"].is_array() {
            break answer.body;
        }
        assert!(Instant::now() < deadline, "the kubelet's Node never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let addresses = json!({"status": {"addresses": kubelet_node["status"]["addresses"]}});
    api.admin(
        "PATCH",
        &format!("/api/v1/nodes/{OURS}/status"),
        Some(&addresses),
    )
    .await;

    let nodes = [
        (OURS, &our_containerd, agent.pid().unwrap()),
        (REFERENCE, &kubelet_containerd, kubelet.pid().unwrap()),
    ];

    // A first pod on each: the sandbox image and busybox unpacked.
    for (node, containerd, _) in nodes {
        let name = vec![format!("warm-{node}")];
        unbound_pod(&api, &name[0], false, false).await;
        bind(&pods, &name[0], node).await;
        running.all(&name).await;
        delete_all(&api, containerd, &name).await;
    }

    // One pod at a time, alternating who goes first.
    let mut one: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 {
            [nodes[0], nodes[1]]
        } else {
            [nodes[1], nodes[0]]
        };
        for (node, containerd, _) in order {
            let name = vec![format!("one-{node}-{round}")];
            unbound_pod(&api, &name[0], false, false).await;
            let sent = [(name[0].clone(), bind(&pods, &name[0], node).await)].into();
            let ready = running.all(&name).await;
            one.entry(node)
                .or_default()
                .extend(latencies(&sent, &ready));
            delete_all(&api, containerd, &name).await;
        }
    }

    // The runtime's part alone, on our node's containerd while it idles.
    let floor_logs = tempfile::tempdir().unwrap();
    let floor = runtime_alone(&our_containerd, floor_logs.path(), ROUNDS).await;

    // Fifty pods bound at once, on one node then the other, three times,
    // taking turns at going first.
    let mut burst: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut idle: BTreeMap<&str, (u64, Duration)> = BTreeMap::new();
    for round in 0..BURSTS {
        let order = if round % 2 == 0 {
            [nodes[0], nodes[1]]
        } else {
            [nodes[1], nodes[0]]
        };
        for (node, containerd, pid) in order {
            let names: Vec<String> = (0..BURST)
                .map(|i| format!("burst-{round}-{node}-{i:02}"))
                .collect();
            for name in &names {
                unbound_pod(&api, name, false, false).await;
            }
            let binds = names.iter().map(|name| {
                let pods = &pods;
                async move { (name.clone(), bind(pods, name, node).await) }
            });
            let sent: BTreeMap<String, SystemTime> =
                futures::future::join_all(binds).await.into_iter().collect();
            let ready = running.all(&names).await;
            burst
                .entry(node)
                .or_default()
                .extend(latencies(&sent, &ready));
            if round == 0 {
                idle.insert(node, idle_usage(pid).await);
            }
            delete_all(&api, containerd, &names).await;
        }
    }

    // With the API access volume: no controller-manager runs here, so the
    // namespace's root CA ConfigMap is made as its publisher would.
    let ca = std::fs::read_to_string(api.ca_file()).unwrap();
    api.admin(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": ca}})),
    )
    .await;
    let (one_volume, burst_volume, requests) =
        with_volumes(&api, &pods, &running, nodes, "vol", false).await;

    // With a CSI volume besides: the example driver on each node.
    let csi_state = tempfile::tempdir().unwrap();
    let _drivers = [
        csi_driver(root.path(), OURS, &csi_state.path().join("ours")),
        csi_driver(
            &kubelet.root(),
            REFERENCE,
            &csi_state.path().join("kubelet"),
        ),
    ];
    api.admin(
        "POST",
        "/apis/storage.k8s.io/v1/csidrivers",
        Some(
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "csi.example.com"},
            "spec": {"attachRequired": false, "podInfoOnMount": true,
                     "volumeLifecycleModes": ["Ephemeral"]}}),
        ),
    )
    .await;
    for node in [OURS, REFERENCE] {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let n = api
                .admin("GET", &format!("/api/v1/nodes/{node}"), None)
                .await;
            let registered = n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
                .as_str()
                .is_some_and(|a| a.contains("csi.example.com"));
            if registered {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the CSI driver never registered on {node}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (one_csi, burst_csi, csi_requests) =
        with_volumes(&api, &pods, &running, nodes, "csi", true).await;

    println!("from binding to Running with every container ready, as a watch of the API shows it:");
    println!(
        "{}",
        percentiles_ms("one pod,          kubelet v1.37.2", one[REFERENCE].clone())
    );
    println!(
        "{}",
        percentiles_ms("one pod,          nodeplugins    ", one[OURS].clone())
    );
    println!(
        "{}",
        percentiles_ms("one pod, the runtime's part alone", floor)
    );
    println!(
        "{}",
        percentiles_ms(
            &format!("{BURST} at once x{BURSTS}, kubelet v1.37.2"),
            burst[REFERENCE].clone()
        )
    );
    println!(
        "{}",
        percentiles_ms(
            &format!("{BURST} at once x{BURSTS}, nodeplugins    "),
            burst[OURS].clone()
        )
    );
    println!("with {BURST} pods running, nothing changing, over {IDLE:?}:");
    for (label, node) in [("kubelet v1.37.2", REFERENCE), ("nodeplugins    ", OURS)] {
        let (rss, cpu) = idle[node];
        println!(
            "  {label}: resident {:>6.1} MiB  CPU {:>6.0} ms ({:.2}% of a core)",
            rss as f64 / 1024.0,
            cpu.as_secs_f64() * 1e3,
            cpu.as_secs_f64() / IDLE.as_secs_f64() * 100.0
        );
    }
    println!("with the kube-api-access volume (token, root CA, namespace):");
    for (label, node) in [("kubelet v1.37.2", REFERENCE), ("nodeplugins    ", OURS)] {
        println!(
            "{}",
            percentiles_ms(&format!("one pod,       {label}"), one_volume[node].clone())
        );
    }
    for (label, node) in [("kubelet v1.37.2", REFERENCE), ("nodeplugins    ", OURS)] {
        println!(
            "{}",
            percentiles_ms(
                &format!("{BURST} at once, {label}"),
                burst_volume[node].clone()
            )
        );
    }
    println!(
        "API requests per pod of the {BURST} at once with the volume (apiserver_request_total):"
    );
    println!("  kubelet v1.37.2: {}", requests[REFERENCE]);
    println!("  nodeplugins:     {}", requests[OURS]);
    println!("with the kube-api-access volume and an inline CSI volume (the example driver):");
    for (label, node) in [("kubelet v1.37.2", REFERENCE), ("nodeplugins    ", OURS)] {
        println!(
            "{}",
            percentiles_ms(&format!("one pod,       {label}"), one_csi[node].clone())
        );
    }
    for (label, node) in [("kubelet v1.37.2", REFERENCE), ("nodeplugins    ", OURS)] {
        println!(
            "{}",
            percentiles_ms(
                &format!("{BURST} at once, {label}"),
                burst_csi[node].clone()
            )
        );
    }
    println!(
        "API requests per pod of the {BURST} at once with both volumes (apiserver_request_total):"
    );
    println!("  kubelet v1.37.2: {}", csi_requests[REFERENCE]);
    println!("  nodeplugins:     {}", csi_requests[OURS]);
}

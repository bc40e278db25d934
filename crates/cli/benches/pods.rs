//! A pod's resources, from its binding to every container ready: our agent
//! against the kubelet's own code (`interop/cmd/kubelet-pods`: its device
//! manager behind its topology manager's admission, and its DRA manager)
//! in one run, against one API server, each on a node of its own with its
//! own example device plugin and DRA driver.
//!
//! Each pod asks for one device in its container and one GPU through a
//! claim the benchmark allocated by hand and reserved for it (no scheduler
//! runs, so the timing starts at the binding the benchmark sends). "Ready"
//! is when the agent recorded the pod admitted (`nodeplugins pods`,
//! `ready_at_unix_us`) or when the kubelet's code emitted `admitted`: both
//! after the device plugin's Allocate and PreStartContainer and the
//! driver's NodePrepareResources. Latency: ready minus the time the binding
//! was sent, on the machine's one clock.
//!
//! Two scenarios: one pod at a time (alternating who goes first), and 100
//! pods bound at once. The API server's own request counters
//! (`apiserver_request_total`) give the requests each side sent per
//! admitted pod, and while nothing changes.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench pods` (builds the Go
//! programs of `interop/` first if they are missing).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use kube::api::Api;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::hand_allocated::PodDevices;
use nodeplugins_test_support::kube_api::{Identity, KubeApi, bind};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::stats::{latencies, percentiles};
use tokio::process::{Child, Command};
use tokio::time::Instant;

const OURS: &str = "bench-ours";
const REFERENCE: &str = "bench-ref";
const RESOURCE: &str = "example.com/device";
const DRIVER: &str = "dra.example.com";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
const ROUNDS: usize = 60;
/// How many times 100 pods are bound at once on each node, taking turns.
const BURSTS: usize = 3;
const BURST: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(120);
/// How long both sides are watched doing nothing.
const IDLE: Duration = Duration::from_secs(10);

/// Pod `name`, not bound yet, with one device and claim `name` (allocated
/// GPU `gpu` of `node`'s pool and reserved for the pod).
async fn unbound_pod(api: &KubeApi, name: &str, node: &str, gpu: usize) {
    let device = format!("gpu-{gpu}");
    let devices = PodDevices {
        resource: RESOURCE,
        class: "gpu.example.com",
        driver: DRIVER,
        pool: node,
        device: &device,
    };
    api.create_pod_with_allocated_claim(name, devices).await;
}

async fn delete(api: &KubeApi, name: &str) {
    let path = format!("{PODS}/{name}?gracePeriodSeconds=0");
    api.admin("DELETE", &path, None).await;
    api.admin("DELETE", &format!("{CLAIMS}/{name}"), None).await;
}

/// Our agent's pods: name → when ready, once `names` are all admitted.
/// Read through the admin socket in this process: the answer carries when
/// each pod was ready, so how often it is read changes nothing measured.
async fn ours_ready(root: &Path, names: &[String]) -> BTreeMap<String, SystemTime> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let reply = nodeplugins::admin::pods(root, Some("default"), None)
            .await
            .unwrap();
        let ready: BTreeMap<String, SystemTime> = reply
            .pods
            .iter()
            .filter(|p| p.phase == nodeplugins::pods::PodPhase::Admitted)
            .filter_map(|p| {
                let at = p.ready_at_unix_us?;
                Some((
                    p.pod.name.clone(),
                    SystemTime::UNIX_EPOCH + Duration::from_micros(at),
                ))
            })
            .collect();
        if names.iter().all(|n| ready.contains_key(n)) {
            return ready;
        }
        assert!(
            Instant::now() < deadline,
            "our agent did not admit {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Our agent's pods once `names` are all gone.
async fn ours_gone(root: &Path, names: &[String]) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let reply = nodeplugins::admin::pods(root, Some("default"), None)
            .await
            .unwrap();
        if !reply.pods.iter().any(|p| names.contains(&p.pod.name)) {
            return;
        }
        assert!(Instant::now() < deadline, "our agent kept {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The kubelet's `admitted` events for `names`: name → when.
async fn reference_ready(
    kubelet: &mut GoProcess,
    names: &[String],
) -> BTreeMap<String, SystemTime> {
    let mut ready = BTreeMap::new();
    for name in names {
        let event = kubelet
            .event(TIMEOUT, "admitted", |e| e["name"] == name.as_str())
            .await;
        let ts = event["ts"].as_u64().unwrap();
        ready.insert(
            name.clone(),
            SystemTime::UNIX_EPOCH + Duration::from_nanos(ts),
        );
    }
    ready
}

async fn reference_gone(kubelet: &mut GoProcess, names: &[String]) {
    for name in names {
        kubelet
            .event(TIMEOUT, "released", |e| e["name"] == name.as_str())
            .await;
    }
}

/// A node's plugins: the example device plugin and DRA driver.
fn plugins(api: &KubeApi, root: &Path, node: &str, kubeconfig: &Path) -> (Child, Child) {
    let mut device = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    device
        .arg("--root-dir")
        .arg(root)
        .args(["--resource", RESOURCE, "--pre-start", "--devices", "128"])
        .args(["--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut driver = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    driver
        .arg("--root-dir")
        .arg(root)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--node-name",
            node,
            "--devices",
            "128",
            "--log-level",
            "warn",
        ])
        .arg("--cdi-dir")
        .arg(root.join("cdi"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _ = api;
    (device.spawn().unwrap(), driver.spawn().unwrap())
}

#[tokio::main]
async fn main() {
    let api = KubeApi::start(OURS).await;
    for node in [OURS, REFERENCE] {
        api.create_schedulable_node(node).await;
    }
    api.ensure_default_service_account("default").await;
    let client = api.client(Identity::Admin).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");

    let ours_root = tempfile::tempdir().unwrap();
    let ours_config = api.kubeconfig_of_node(OURS);
    let mut agent_command = Command::new(binary("nodeplugins-cli", "nodeplugins"));
    agent_command
        .args(["run", "--metrics-addr", "off", "--log-level", "warn"])
        .arg("--root-dir")
        .arg(ours_root.path())
        .arg("--kubeconfig")
        .arg(&ours_config)
        .args(["--container-runtime-endpoint", "simulated"])
        .args(["--node-name", OURS]);
    let _agent = ChildProcess::spawn("nodeplugins run", agent_command);
    let _ours_plugins = plugins(&api, ours_root.path(), OURS, &ours_config);

    let ref_root = tempfile::tempdir().unwrap();
    let ref_config = api.kubeconfig_of_node(REFERENCE);
    let mut kubelet = GoProcess::start(
        "kubelet-pods",
        [
            "--root-dir",
            ref_root.path().to_str().unwrap(),
            "--state-dir",
            ref_root.path().join("dra-state").to_str().unwrap(),
            "--node-name",
            REFERENCE,
            "--kubeconfig",
            ref_config.to_str().unwrap(),
        ],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    let _ref_plugins = plugins(&api, ref_root.path(), REFERENCE, &ref_config);
    kubelet
        .event(TIMEOUT, "registered", |e| e["name"] == DRIVER)
        .await;
    kubelet
        .event(TIMEOUT, "node_status", |e| {
            e["allocatable"][RESOURCE] == "128"
        })
        .await;
    // Our agent has both plugins once a first pod is admitted.
    let warm = vec!["warm".to_string()];
    unbound_pod(&api, "warm", OURS, 127).await;
    bind(&pods, "warm", OURS).await;
    ours_ready(ours_root.path(), &warm).await;
    delete(&api, "warm").await;
    ours_gone(ours_root.path(), &warm).await;

    // One pod at a time, alternating who goes first.
    let (mut ours_one, mut ref_one) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for ours in [round % 2 == 0, round % 2 == 1] {
            let node = if ours { OURS } else { REFERENCE };
            let name = vec![format!("one-{node}-{round}")];
            unbound_pod(&api, &name[0], node, round % 100).await;
            let sent: BTreeMap<String, SystemTime> =
                [(name[0].clone(), bind(&pods, &name[0], node).await)].into();
            if ours {
                let ready = ours_ready(ours_root.path(), &name).await;
                ours_one.extend(latencies(&sent, &ready));
                delete(&api, &name[0]).await;
                ours_gone(ours_root.path(), &name).await;
            } else {
                let ready = reference_ready(&mut kubelet, &name).await;
                ref_one.extend(latencies(&sent, &ready));
                delete(&api, &name[0]).await;
                reference_gone(&mut kubelet, &name).await;
            }
        }
    }

    // A hundred pods bound at once, on one node then the other, three
    // times, taking turns at going first.
    let mut burst: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut counted = BTreeMap::new();
    for round in 0..BURSTS {
        for ours in [round % 2 == 0, round % 2 == 1] {
            let node = if ours { OURS } else { REFERENCE };
            let names: Vec<String> = (0..BURST)
                .map(|i| format!("burst-{round}-{node}-{i:03}"))
                .collect();
            for (i, name) in names.iter().enumerate() {
                unbound_pod(&api, name, node, i).await;
            }
            let before = api.request_counts().await;
            let binds = names.iter().map(|name| {
                let pods = &pods;
                async move { (name.clone(), bind(pods, name, node).await) }
            });
            let sent: BTreeMap<String, SystemTime> =
                futures::future::join_all(binds).await.into_iter().collect();
            let ready = if ours {
                ours_ready(ours_root.path(), &names).await
            } else {
                reference_ready(&mut kubelet, &names).await
            };
            let after = api.request_counts().await;
            // The benchmark's own: the bindings.
            let ignore = [("POST pods/binding", BURST as f64)];
            counted.insert(node, after.since(&before, &ignore).per(BURST as f64));
            burst
                .entry(node)
                .or_default()
                .extend(latencies(&sent, &ready));
            if round == 0 {
                // Nothing changes for a while: what is asked meanwhile?
                let before = api.request_counts().await;
                tokio::time::sleep(IDLE).await;
                let after = api.request_counts().await;
                let idle = after.since(&before, &[]).per(1.0);
                counted.insert(if ours { "idle 1" } else { "idle 2" }, idle);
            }
            for name in &names {
                delete(&api, name).await;
            }
            if ours {
                ours_gone(ours_root.path(), &names).await;
            } else {
                reference_gone(&mut kubelet, &names).await;
            }
        }
    }

    println!("from binding to every container ready (one device, one claim each):");
    println!("{}", percentiles("one pod,   kubelet's code", ref_one));
    println!("{}", percentiles("one pod,   nodeplugins   ", ours_one));
    println!(
        "{}",
        percentiles(
            &format!("100 at once x{BURSTS}, kubelet's code"),
            burst[REFERENCE].clone()
        )
    );
    println!(
        "{}",
        percentiles(
            &format!("100 at once x{BURSTS}, nodeplugins   "),
            burst[OURS].clone()
        )
    );
    println!(
        "API requests per admitted pod (apiserver_request_total), 100 at once, the last time:"
    );
    println!("  kubelet's code: {}", counted[REFERENCE]);
    println!("  nodeplugins:    {}", counted[OURS]);
    println!(
        "API requests over {IDLE:?} with nothing changing, both nodes together (watches open):"
    );
    println!("  100 pods on nodeplugins' node:    {}", counted["idle 1"]);
    println!("  100 pods on the kubelet code's:   {}", counted["idle 2"]);
}

//! Pod-level DRA prepare, our agent against the kubelet's own DRA manager,
//! in one run against the same driver and API server: a pod with 4 claims
//! on the SDK's example DRA driver, prepared and unprepared in turns by
//! `interop/bin/kubelet-dra` (the kubelet's `pkg/kubelet/cm/dra`) and by
//! our agent (`dra prepare --pod` through the admin socket). Each prepare
//! reads the pod and its claims from the API, calls the driver once with
//! the 4 claims, records them, and answers each container's CDI ids.
//!
//! Both are timed from the benchmark, request sent to answer read: the
//! kubelet's over its stdin/stdout pipes, ours over the admin socket.
//!
//! The kubelet's client is rate-limited as a kubelet's is by default (50
//! requests a second, bursts of 100); with `KUBELET_QPS=-1` it is not,
//! which measures the DRA manager's own work.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench pod_dra` (builds the Go
//! programs of `interop/` first if they are missing).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::stats::percentiles;
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::time::Instant;

const NODE: &str = "bench-node";
const DRIVER: &str = "dra.example.com";
const CLAIMS: usize = 4;
const ROUNDS: usize = 200;
const TIMEOUT: Duration = Duration::from_secs(60);

async fn admin(api: &KubeApi, method: &str, path: &str, body: Option<&Value>) -> Value {
    let response = api.request(Identity::Admin, method, path, body).await;
    assert!(
        (200..300).contains(&response.status),
        "{method} {path}: {} {}",
        response.status,
        response.body
    );
    response.body
}

/// Pod `bench` on the node, with `CLAIMS` claims each allocated one GPU
/// and reserved for it; container `main` uses them all.
async fn pod_with_claims(api: &KubeApi) {
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let _ = api
        .request(
            Identity::Admin,
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            Some(&account),
        )
        .await;
    let claims_path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
    let names: Vec<String> = (0..CLAIMS).map(|i| format!("claim-{i}")).collect();
    for name in &names {
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
        });
        admin(api, "POST", claims_path, Some(&claim)).await;
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bench"},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": false,
            "resourceClaims": names.iter().map(|n| json!({"name": n, "resourceClaimName": n})).collect::<Vec<_>>(),
            "containers": [{"name": "main", "image": "example.invalid/app",
                "resources": {"claims": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()}}],
        },
    });
    let created = admin(api, "POST", "/api/v1/namespaces/default/pods", Some(&pod)).await;
    let uid = created["metadata"]["uid"].clone();
    for (i, name) in names.iter().enumerate() {
        let status = json!({"status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": format!("gpu-{i}")},
            ]}},
            "reservedFor": [{"resource": "pods", "name": "bench", "uid": uid}],
        }});
        admin(
            api,
            "PATCH",
            &format!("{claims_path}/{name}/status"),
            Some(&status),
        )
        .await;
    }
}

async fn nodeplugins(root: &Path, args: &[&str]) -> Value {
    let out = Command::new(binary("nodeplugins-cli", "nodeplugins"))
        .args(args)
        .arg("--root-dir")
        .arg(root)
        .args(["-o", "json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn p50(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

#[tokio::main]
async fn main() {
    let api = KubeApi::start(NODE).await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
    admin(&api, "POST", "/api/v1/nodes", Some(&node)).await;
    pod_with_claims(&api).await;
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = api.node_kubeconfig();
    let kubeconfig = kubeconfig.to_str().unwrap();

    // The kubelet's client-side limit (50 requests a second, bursts of
    // 100), or with KUBELET_QPS=-1 none, as our agent has none.
    let qps = std::env::var("KUBELET_QPS").unwrap_or_else(|_| "50".into());
    let mut kubelet = GoProcess::start(
        "kubelet-dra",
        [
            "--registry-dir",
            root.path().join("plugins_registry").to_str().unwrap(),
            "--state-dir",
            root.path().join("kubelet-dra").to_str().unwrap(),
            "--node-name",
            NODE,
            "--kubeconfig",
            kubeconfig,
            "--kube-api-qps",
            &qps,
        ],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    let mut agent_command = Command::new(binary("nodeplugins-cli", "nodeplugins"));
    agent_command
        .args(["run", "--metrics-addr", "off", "--log-level", "warn"])
        .arg("--root-dir")
        .arg(root.path())
        .args(["--kubeconfig", kubeconfig, "--node-name", NODE])
        // Pods prepared by hand, as the kubelet's DRA manager is asked.
        .args(["--pods", "off"]);
    let _agent = ChildProcess::spawn("nodeplugins run", agent_command);
    let mut driver_command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    driver_command
        .arg("--root-dir")
        .arg(root.path())
        .args(["--kubeconfig", kubeconfig, "--node-name", NODE])
        .arg("--cdi-dir")
        .arg(root.path().join("cdi"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _driver = driver_command.spawn().unwrap();
    kubelet
        .event(TIMEOUT, "registered", |e| e["name"] == DRIVER)
        .await;
    // Once our agent has the driver, a prepare succeeds.
    let deadline = Instant::now() + TIMEOUT;
    let pod = ["dra", "prepare", "--pod", "default/bench"];
    loop {
        let out = Command::new(binary("nodeplugins-cli", "nodeplugins"))
            .args(pod)
            .arg("--root-dir")
            .arg(root.path())
            .output()
            .await
            .unwrap();
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent never prepared the pod"
        );
    }
    nodeplugins(root.path(), &["dra", "unprepare", "--pod", "default/bench"]).await;

    let request = json!({"namespace": "default", "name": "bench"});
    let (mut kubelet_times, mut ours_times) = (Vec::new(), Vec::new());
    let mut kubelet_inside = Vec::new();
    for round in 0..ROUNDS {
        // Alternate who goes first, so that neither always finds the
        // driver or the API server warmer.
        for ours in [round % 2 == 0, round % 2 == 1] {
            if ours {
                let started = Instant::now();
                let reply = nodeplugins::admin::dra_prepare_pod(root.path(), "default", "bench")
                    .await
                    .unwrap();
                ours_times.push(started.elapsed());
                assert!(!reply.failed(), "{reply:?}");
                assert_eq!(reply.containers[0].cdi_device_ids.len(), CLAIMS);
                let done = nodeplugins::admin::dra_unprepare_pod(root.path(), "default", "bench")
                    .await
                    .unwrap();
                assert!(!done.failed(), "{done:?}");
            } else {
                let started = Instant::now();
                let reply = kubelet.request(TIMEOUT, "prepare", request.clone()).await;
                kubelet_times.push(started.elapsed());
                assert_eq!(reply["error"], "", "{reply}");
                let ids = reply["response"]["containers"]["main"].as_array().unwrap();
                assert_eq!(ids.len(), CLAIMS, "{reply}");
                kubelet_inside.push(Duration::from_nanos(
                    reply["took_ns"].as_u64().unwrap_or_default(),
                ));
                let done = kubelet.request(TIMEOUT, "unprepare", request.clone()).await;
                assert_eq!(done["error"], "", "{done}");
            }
        }
    }
    println!(
        "pod-level prepare, {CLAIMS} claims on one driver, {ROUNDS} rounds each (kubelet API QPS {qps}):"
    );
    println!(
        "{}",
        percentiles("kubelet DRA manager, round trip ", kubelet_times.clone())
    );
    println!(
        "{}",
        percentiles("kubelet DRA manager, inside     ", kubelet_inside)
    );
    println!(
        "{}",
        percentiles("nodeplugins agent, round trip   ", ours_times.clone())
    );
    let ratio = p50(&kubelet_times).as_secs_f64() / p50(&ours_times).as_secs_f64();
    println!("kubelet p50 / ours p50: {ratio:.2}x");
}

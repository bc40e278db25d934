//! What an idle node costs the API server: the requests our agent and the
//! real kubelet v1.37.2 (built by `interop/`) each send in an hour with no
//! pod, and their memory and CPU meanwhile.
//!
//! Both register their Node (`--register-node on` for ours) on one real
//! kube-apiserver whose audit log (level `Metadata`) names each request's
//! user, each on a containerd of its own; nothing else runs. After both
//! Nodes exist and a settling minute has passed, every request each node
//! identity sends over the window (6 min by default, one more than the
//! kubelet's 5-minute status report period;
//! `NODE_IDLE_WINDOW_SECS` sets it) is counted by verb and resource, and
//! scaled to an hour; a watch counts once, when it is opened. Each agent's
//! resident memory at the end and the CPU time it used over the window are
//! read from `/proc` (the node agent's process alone).
//!
//! Run: `cargo bench -p nodeplugins-cli --bench node_idle`.

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::real_kubelet::RealKubelet;
use nodeplugins_test_support::stats::process_usage;
use serde_json::Value;
use tokio::process::Command;
use tokio::time::Instant;

const OURS: &str = "idle-ours";
const REFERENCE: &str = "idle-kubelet";
/// Waited after both Nodes exist: their first writes are not idle.
const SETTLE: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_secs(120);

/// The audit policy: every request, its metadata only.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// The requests of `user` in `log` from byte `from` on, by `VERB
/// resource[/subresource]`, each once (a watch is logged when it starts
/// and again when it ends).
fn requests_of(log: &Path, from: usize, user: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut seen = HashSet::new();
    let mut counts = BTreeMap::new();
    for line in text[from.min(text.len())..].lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != user
            || !seen.insert(event["auditID"].as_str().unwrap_or_default().to_string())
        {
            continue;
        }
        let object = &event["objectRef"];
        let resource = object["resource"].as_str().unwrap_or("");
        let key = match object["subresource"].as_str() {
            Some(sub) => format!("{} {resource}/{sub}", event["verb"].as_str().unwrap_or("")),
            None => format!("{} {resource}", event["verb"].as_str().unwrap_or("")),
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
}

fn per_hour(counts: &BTreeMap<String, u64>, window: Duration) -> String {
    let scale = 3600.0 / window.as_secs_f64();
    let total: u64 = counts.values().sum();
    let parts: Vec<String> = counts
        .iter()
        .map(|(key, n)| format!("{key} {:.0}", *n as f64 * scale))
        .collect();
    format!("{:.0} ({})", total as f64 * scale, parts.join(", "))
}

async fn node_exists(api: &KubeApi, node: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let answer = api
            .request(
                Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{node}"),
                None,
            )
            .await;
        if answer.status == 200 && answer.body["status"]["conditions"].is_array() {
            return;
        }
        assert!(Instant::now() < deadline, "{node}'s Node never came");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("node_idle: benchmark");
        return;
    }
    let window = Duration::from_secs(
        std::env::var("NODE_IDLE_WINDOW_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(360),
    );
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    let audit_log = dir.path().join("audit.log");
    let api = KubeApi::start_with(
        OURS,
        &[
            &format!("--audit-policy-file={}", policy.display()),
            &format!("--audit-log-path={}", audit_log.display()),
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ],
    )
    .await;

    let kubelet_containerd = Containerd::start().await;
    let kubelet_config = api.kubeconfig_of_node(REFERENCE);
    let kubelet = RealKubelet::start(REFERENCE, &kubelet_config, &kubelet_containerd).await;
    let our_containerd = Containerd::start().await;
    let root = tempfile::tempdir().unwrap();
    let mut agent_command = Command::new(binary("nodeplugins-cli", "nodeplugins"));
    agent_command
        .args(["run", "--metrics-addr", "off", "--log-level", "warn"])
        .arg("--root-dir")
        .arg(root.path())
        .arg("--kubeconfig")
        .arg(api.kubeconfig_of_node(OURS))
        .args(["--node-name", OURS, "--register-node", "on"])
        .args(["--container-runtime-endpoint", &our_containerd.endpoint()])
        .arg("--pod-logs-dir")
        .arg(root.path().join("pod-logs"));
    let agent = ChildProcess::spawn("nodeplugins run", agent_command);
    node_exists(&api, REFERENCE).await;
    node_exists(&api, OURS).await;
    tokio::time::sleep(SETTLE).await;

    let pids = [
        (REFERENCE, kubelet.pid().unwrap()),
        (OURS, agent.pid().unwrap()),
    ];
    let from = std::fs::metadata(&audit_log).unwrap().len() as usize;
    let cpu_before: BTreeMap<&str, Duration> = pids
        .iter()
        .map(|(node, pid)| (*node, process_usage(*pid).1))
        .collect();
    tokio::time::sleep(window).await;
    println!(
        "idle, no pods, over {} s, scaled to an hour (the audit log, by node identity):",
        window.as_secs()
    );
    for (label, node, pid) in [
        ("kubelet v1.37.2", REFERENCE, pids[0].1),
        ("nodeplugins    ", OURS, pids[1].1),
    ] {
        let (rss, cpu) = process_usage(pid);
        let cpu = cpu.saturating_sub(cpu_before[node]);
        let counts = requests_of(&audit_log, from, &format!("system:node:{node}"));
        println!("  {label}: requests/h {}", per_hour(&counts, window));
        println!(
            "  {label}: resident {:>6.1} MiB  CPU {:>6} ms ({:.2}% of a core)",
            rss as f64 / 1024.0,
            cpu.as_millis(),
            cpu.as_secs_f64() / window.as_secs_f64() * 100.0
        );
    }
}

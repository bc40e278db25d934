//! What the agent tells observers: `events` (history and `--follow`), and
//! metrics, health and readiness under the kubelet's names.

use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

use super::common::{agent, cli, dra_driver_when, http_get, signal, status_json};
use super::{DRIVER, connected, example_driver};

#[tokio::test(flavor = "multi_thread")]
async fn events_replay_the_history_and_follow_new_ones() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let mut plugin = example_driver(root.path(), None);
    dra_driver_when(root.path(), DRIVER, |d| connected(d, "dra.sock")).await;

    let out = cli(root.path(), &["events", "-o", "json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let has = |source: &str, kind: &str| {
        events
            .iter()
            .any(|e| e["source"] == source && e["kind"] == kind)
    };
    assert!(has("registry", "registered"), "{events:?}");
    assert!(
        has("dra", "instance_added") && has("dra", "connected"),
        "{events:?}"
    );
    let table = cli(root.path(), &["events"]).await;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("TIME"), "{table}");
    assert!(table.contains("DRAPlugin dra.example.com"), "{table}");

    let mut follow = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    follow
        .args(["events", "--follow", "-o", "json", "--root-dir"])
        .arg(root.path());
    let mut follow = ChildProcess::spawn("nodeplugins events --follow", follow);
    follow
        .wait_for_line(TIMEOUT, |l| l.contains("\"connected\""))
        .await;
    signal(&plugin, "-TERM").await;
    assert_eq!(plugin.wait(TIMEOUT).await, Some(0));
    // Both sources report the removal, in either order.
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 2 {
        let line = follow
            .wait_for_line(TIMEOUT, |l| {
                l.contains("\"deregistered\"") || l.contains("\"instance_removed\"")
            })
            .await;
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        seen.insert(event["kind"].as_str().unwrap().to_string());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_health_and_readiness_are_served_with_the_kubelets_names() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let status = eventually("agent status", TIMEOUT, || status_json(root.path())).await;
    let addr = status["metrics_addr"].as_str().unwrap().to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let _plugin = example_driver(root.path(), None);
    dra_driver_when(root.path(), DRIVER, |d| connected(d, "dra.sock")).await;
    let out = cli(
        root.path(),
        &["dra", "prepare", "--driver", DRIVER, "--claim", "ns/c/u1"],
    )
    .await;
    assert!(out.status.success());

    let (code, body) = http_get(&addr, "/metrics").await;
    assert_eq!(code, 200);
    let socket = root
        .path()
        .join("plugins_registry/dra.example.com-reg.sock");
    for want in [
        format!(
            "plugin_manager_total_plugins{{socket_path=\"{}\",state=\"actual_state_of_world\"}} 1",
            socket.display()
        ),
        "dra_operations_duration_seconds_count{operation_name=\"PrepareResources\",is_error=\"false\"} 1".to_string(),
        "dra_grpc_operations_duration_seconds_count{driver_name=\"dra.example.com\",method_name=\"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources\",grpc_status_code=\"OK\"} 1".to_string(),
        // A family shows once it has a sample, as the kubelet's do.
        "# TYPE dra_operations_duration_seconds histogram".to_string(),
        "# TYPE plugin_manager_total_plugins gauge".to_string(),
    ] {
        assert!(body.contains(&want), "missing {want}\n{body}");
    }
    assert_eq!(http_get(&addr, "/healthz").await, (200, "ok\n".to_string()));
    assert_eq!(http_get(&addr, "/readyz").await.0, 200);
    assert_eq!(http_get(&addr, "/nothing").await.0, 404);
}

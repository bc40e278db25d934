//! DRA end to end with separate processes: `example-dra-driver` and a grpcio
//! driver against `nodeplugins run`, through the CLI: prepare and unprepare,
//! device health, a rolling update with no failed prepare, and cleanup after
//! the grace period.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use nodeplugins::dra::ClaimRef;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

const DRIVER: &str = "dra.example.com";

fn example_driver(root: &Path, instance: Option<&str>) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    command.arg("--root-dir").arg(root);
    if let Some(id) = instance {
        command.args(["--instance", id]);
    }
    ChildProcess::spawn("example-dra-driver", command)
}

fn connected(d: &serde_json::Value, endpoint_part: &str) -> bool {
    d["instances"].as_array().is_some_and(|list| {
        list.iter().any(|i| {
            i["connected"] == true
                && i["endpoint"]
                    .as_str()
                    .is_some_and(|e| e.contains(endpoint_part))
        })
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn example_dra_driver_prepares_unprepares_and_reports_health_through_the_cli() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let plugin = example_driver(root.path(), None);
    let d = dra_driver_when(root.path(), DRIVER, |d| {
        connected(d, "dra.sock") && d["devices"].as_array().is_some_and(|v| v.len() == 4)
    })
    .await;
    assert_eq!(d["instances"][0]["service"], "v1.DRAPlugin");
    assert_eq!(d["instances"][0]["health_service"], "v1.DRAResourceHealth");
    assert_eq!(
        d["instances"][0]["endpoint"].as_str().unwrap(),
        root.path()
            .join("plugins/dra.example.com/dra.sock")
            .to_str()
            .unwrap()
    );
    assert!(
        d["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["health"] == "Healthy")
    );

    let out = cli(
        root.path(),
        &[
            "dra",
            "prepare",
            "--driver",
            DRIVER,
            "--claim",
            "default/gpu-claim/uid-1",
            "-o",
            "json",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claim = &json["claims"][0];
    assert_eq!(claim["claim"]["uid"], "uid-1");
    assert_eq!(claim["error"], serde_json::Value::Null);
    let device = claim["devices"][0]["device"].as_str().unwrap().to_string();
    assert!(device.starts_with("gpu-"), "{device}");
    assert_eq!(
        claim["devices"][0]["cdi_device_ids"][0],
        format!("dra.example.com/gpu={device}")
    );

    // The table shows the CDI id; a refused claim makes the command fail but
    // the other claim's result is still printed.
    let out = cli(
        root.path(),
        &[
            "dra",
            "prepare",
            "--driver",
            DRIVER,
            "--claim",
            "default/gpu-claim/uid-1",
            "--claim",
            "default/fail-me/uid-2",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("dra.example.com/gpu={device}")),
        "{table}"
    );
    assert!(table.contains("refused"), "{table}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 claim(s) could not be prepared"));

    let out = cli(
        root.path(),
        &[
            "dra",
            "unprepare",
            "--driver",
            DRIVER,
            "--claim",
            "default/gpu-claim/uid-1",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("unprepared"));

    let out = cli(
        root.path(),
        &[
            "dra",
            "prepare",
            "--driver",
            "missing.example.com",
            "--claim",
            "a/b/c",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("DRA driver missing.example.com is not registered")
    );

    // SIGUSR1: the driver reports gpu-0 unhealthy, with its reason.
    signal(&plugin, "-USR1").await;
    let d = dra_driver_when(root.path(), DRIVER, |d| {
        d["devices"]
            .as_array()
            .is_some_and(|v| v.iter().any(|h| h["health"] == "Unhealthy"))
    })
    .await;
    let sick = d["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["health"] == "Unhealthy")
        .unwrap();
    assert_eq!(sick["device"], "gpu-0");
    assert!(sick["message"].as_str().unwrap().contains("XID 79"));
    let out = cli(root.path(), &["dra", "drivers"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("Unhealthy"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_update_of_example_dra_driver_never_fails_a_prepare() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let mut old = example_driver(root.path(), Some("pod-old"));
    dra_driver_when(root.path(), DRIVER, |d| connected(d, "dra-pod-old.sock")).await;

    // Prepare continuously while the new instance starts and the old one stops.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let caller = {
        let (root, stop, ok, failures) = (
            root.path().to_owned(),
            stop.clone(),
            ok.clone(),
            failures.clone(),
        );
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let claims = vec![ClaimRef {
                    namespace: "default".into(),
                    name: format!("claim-{n}"),
                    uid: format!("uid-{n}"),
                }];
                match nodeplugins::admin::dra_prepare(&root, DRIVER, claims, None).await {
                    Ok(reply) if reply.claims[0].error.is_none() => {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(reply) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{:?}", reply.claims[0].error)),
                    Err(e) => failures.lock().unwrap().push(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let progress = |min: usize| {
        let ok = ok.clone();
        async move {
            eventually("prepare calls succeeding", TIMEOUT, || async {
                (ok.load(Ordering::SeqCst) >= min).then_some(())
            })
            .await
        }
    };
    progress(20).await;

    let _new = example_driver(root.path(), Some("pod-new"));
    let d =
        dra_driver_when(root.path(), DRIVER, |d| {
            connected(d, "dra-pod-new.sock")
                && d["instances"].as_array().unwrap().iter().any(|i| {
                    i["in_use"] == true && i["endpoint"].as_str().unwrap().contains("pod-new")
                })
        })
        .await;
    assert_eq!(d["instances"].as_array().unwrap().len(), 2);
    progress(ok.load(Ordering::SeqCst) + 20).await;

    signal(&old, "-TERM").await;
    assert_eq!(old.wait(TIMEOUT).await, Some(0));
    dra_driver_when(root.path(), DRIVER, |d| {
        d["instances"].as_array().is_some_and(|v| v.len() == 1)
    })
    .await;
    progress(ok.load(Ordering::SeqCst) + 20).await;

    stop.store(true, Ordering::SeqCst);
    caller.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} prepare(s) failed: {failures:?}",
        failures.len()
    );
    let d = dra_driver_when(root.path(), DRIVER, |_| true).await;
    assert!(
        d["pending_cleanup"].is_null(),
        "an upgrade schedules no cleanup: {d}"
    );
    assert!(d["cleaned_up_at_unix_ms"].is_null());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_driver_is_cleaned_up_after_the_grace_period() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent_with(root.path(), &["--dra-cleanup-grace", "300ms"]);
    let mut plugin = example_driver(root.path(), None);
    dra_driver_when(root.path(), DRIVER, |d| connected(d, "dra.sock")).await;
    let mut events = eventually("event stream", TIMEOUT, || async {
        nodeplugins::admin::events(root.path()).await.ok()
    })
    .await;
    plugin.kill().await;

    let mut seen = Vec::new();
    while !seen.contains(&"cleaned_up".to_string()) {
        let event = tokio::time::timeout(TIMEOUT, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let json = serde_json::to_value(&event).unwrap();
        if json["source"] == "dra" {
            assert_eq!(json["driver"], DRIVER);
            seen.push(json["kind"].as_str().unwrap().to_string());
        }
    }
    // A process being SIGKILLed can still accept and answer a reconnection
    // for a moment (seen once in CI: connected and cleanup_cancelled, then
    // disconnected again); the story must still start with the drop and end
    // with a drop held for the whole grace period.
    let (last, story) = seen.split_last().unwrap();
    assert_eq!(last, "cleaned_up");
    let pairs: Vec<&[String]> = story.chunks(2).collect();
    let down = ["disconnected", "cleanup_scheduled"];
    let up = ["connected", "cleanup_cancelled"];
    assert!(pairs.first().is_some_and(|p| *p == down), "{seen:?}");
    assert!(pairs.last().is_some_and(|p| *p == down), "{seen:?}");
    assert!(pairs.iter().all(|p| *p == down || *p == up), "{seen:?}");
    // The registration socket is stale, not removed: the instance stays registered.
    let d = dra_driver_when(root.path(), DRIVER, |d| {
        !d["cleaned_up_at_unix_ms"].is_null()
    })
    .await;
    assert_eq!(d["instances"].as_array().unwrap().len(), 1);
    assert_eq!(d["instances"][0]["connected"], false);
    let out = cli(root.path(), &["dra", "drivers"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("cleaned up"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_restarted_within_the_grace_period_is_not_cleaned_up() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent_with(root.path(), &["--dra-cleanup-grace", "10m"]);
    let mut plugin = example_driver(root.path(), None);
    dra_driver_when(root.path(), DRIVER, |d| connected(d, "dra.sock")).await;
    plugin.kill().await;
    let d = dra_driver_when(root.path(), DRIVER, |d| !d["pending_cleanup"].is_null()).await;
    assert!(d["pending_cleanup"]["in_ms"].as_u64().unwrap() > 60_000);
    let out = cli(root.path(), &["dra", "drivers"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("cleanup in"));

    // The same driver comes back: it replaces its stale sockets and connects.
    let _plugin = example_driver(root.path(), None);
    let d = dra_driver_when(root.path(), DRIVER, |d| {
        connected(d, "dra.sock") && d["pending_cleanup"].is_null()
    })
    .await;
    assert!(d["cleaned_up_at_unix_ms"].is_null());
    let out = cli(
        root.path(),
        &["dra", "prepare", "--driver", DRIVER, "--claim", "ns/c/u"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grpcio_dra_driver_prepares_through_the_agent_in_both_versions() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let registry = root.path().join("plugins_registry");
    let plugins = root.path().join("plugins");
    std::fs::create_dir_all(&registry).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    for api in ["v1", "v1beta1"] {
        let name = format!("{api}.python.example.com");
        let mut command = python_env().script("dra_driver.py");
        command
            .arg("--registration-socket")
            .arg(registry.join(format!("{name}-reg.sock")))
            .arg("--service-socket")
            .arg(plugins.join(format!("{api}.sock")))
            .args(["--name", &name, "--api", api]);
        let mut python = ChildProcess::spawn("dra_driver.py", command);
        python.wait_for_line(TIMEOUT, |l| l == "READY").await;
        python
            .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY registered=True"))
            .await;
        let d = dra_driver_when(root.path(), &name, |d| connected(d, &format!("{api}.sock"))).await;
        assert_eq!(d["instances"][0]["service"], format!("{api}.DRAPlugin"));

        let out = cli(
            root.path(),
            &[
                "dra",
                "prepare",
                "--driver",
                &name,
                "--claim",
                "ns/ok/u1",
                "--claim",
                "ns/fail-x/u2",
                "-o",
                "json",
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(1), "{api}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["claims"][0]["devices"][0]["device"], "py-u1", "{api}");
        assert_eq!(json["claims"][0]["devices"][0]["pool"], "py-pool");
        assert_eq!(
            json["claims"][0]["devices"][0]["cdi_device_ids"][0],
            format!("{name}/gpu=py-u1")
        );
        assert_eq!(json["claims"][1]["error"], "python driver refuses fail-x");
        python.wait_for_line(TIMEOUT, |l| l == "PREPARE u1").await;

        let out = cli(
            root.path(),
            &["dra", "unprepare", "--driver", &name, "--claim", "ns/ok/u1"],
        )
        .await;
        assert!(
            out.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        python.wait_for_line(TIMEOUT, |l| l == "UNPREPARE u1").await;
    }
}

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
        "# TYPE kubelet_device_plugin_alloc_duration_seconds histogram".to_string(),
    ] {
        assert!(body.contains(&want), "missing {want}\n{body}");
    }
    assert_eq!(http_get(&addr, "/healthz").await, (200, "ok\n".to_string()));
    assert_eq!(http_get(&addr, "/readyz").await.0, 200);
    assert_eq!(http_get(&addr, "/nothing").await.0, 404);
}

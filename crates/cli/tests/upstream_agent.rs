//! Upstream plugins against our agent: programs built from the Kubernetes Go
//! modules (`interop/`), unmodified upstream code, run as separate processes
//! against `nodeplugins run`:
//! - the kubelet's own example plugin (`pluginwatcher.NewTestExamplePlugin`);
//! - the kubelet's own device plugin stub (`NewDevicePluginStub`), which
//!   dials `kubelet.sock` with a path-valued `:authority`;
//! - a DRA driver on the official Go helper (`kubeletplugin`), including its
//!   rolling-update mode.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

/// The agent, started and answering its admin socket.
async fn ready_agent(root: &Path) -> nodeplugins_test_support::process::ChildProcess {
    let agent = agent(root);
    eventually("the agent to answer", TIMEOUT, || status_json(root)).await;
    agent
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Rows of `status -o json` for plugins whose name starts with `prefix`.
async fn plugin_rows(root: &Path, prefix: &str) -> Option<Vec<Value>> {
    let status = status_json(root).await?;
    Some(
        status["plugins"]
            .as_array()?
            .iter()
            .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .cloned()
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_example_plugins_register_in_a_burst_of_200_and_deregister_when_stopped() {
    let root = tempfile::tempdir().unwrap();
    let _agent = ready_agent(root.path()).await;
    let registry = root.path().join("plugins_registry");
    let mut fleet = GoProcess::start(
        "example-plugins",
        [
            "--dir",
            arg(&registry),
            "--count",
            "200",
            "--name-prefix",
            "kubelet-example",
        ],
    );

    let done = fleet
        .event(Duration::from_secs(60), "all_registered", |_| true)
        .await;
    assert_eq!(done["count"], 200);
    // Every plugin was told it is registered, with no error.
    let notified = fleet.seen("notified");
    assert_eq!(notified.len(), 200, "one notification per plugin");
    assert!(
        notified
            .iter()
            .all(|n| n["registered"] == true && n["error"] == ""),
        "{notified:?}"
    );
    // The agent records each registration once the plugin's answer to its
    // notification is in, a moment after the plugin has it.
    eventually("every example plugin registered", TIMEOUT, || async {
        plugin_rows(root.path(), "kubelet-example")
            .await
            .filter(|rows| {
                rows.len() == 200
                    && rows
                        .iter()
                        .all(|r| r["state"] == "registered" && r["type"] == "DRAPlugin")
            })
    })
    .await;

    // Stopping them removes their sockets; the agent deregisters them all.
    fleet.close_stdin();
    fleet.event(TIMEOUT, "stopped", |_| true).await;
    assert_eq!(fleet.wait(TIMEOUT).await, Some(0));
    eventually("every example plugin deregistered", TIMEOUT, || async {
        plugin_rows(root.path(), "kubelet-example")
            .await
            .filter(|rows| rows.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_device_plugin_stub_registers_on_our_kubelet_sock_allocates_and_survives_an_agent_restart()
 {
    const RESOURCE: &str = "example.com/resource";
    let root = tempfile::tempdir().unwrap();
    let mut agent = ready_agent(root.path()).await;
    let kubelet_sock = root.path().join("device-plugins/kubelet.sock");
    let mut stub = GoProcess::start(
        "stub-device-plugin",
        [
            "--kubelet-sock",
            arg(&kubelet_sock),
            "--resource",
            RESOURCE,
            "--devices",
            "Dev-1,Dev-2",
            "--preferred",
            "--prestart",
            "--watch",
        ],
    );
    let registered = stub.event(TIMEOUT, "registered", |_| true).await;
    assert_eq!(registered["error"], "", "the stub's Register call failed");
    let r = resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 2).await;
    assert_eq!(r["capacity"], 2);
    let instance = &r["instances"][0];
    assert_eq!(instance["get_preferred_allocation_available"], true);
    assert_eq!(instance["pre_start_required"], true);

    // Health changes stream through ListAndWatch.
    let update = |health: &str| json!({"devices": [{"id": "Dev-1", "health": health}, {"id": "Dev-2", "health": "Healthy"}]});
    stub.request(TIMEOUT, "update", update("Unhealthy")).await;
    resource_when(root.path(), RESOURCE, |r| {
        r["allocatable"] == 1 && r["capacity"] == 2
    })
    .await;
    stub.request(TIMEOUT, "update", update("Healthy")).await;
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 2).await;

    // The stub prefers devices from the end of the available list: the agent
    // must ask it and follow its choice, then call Allocate with it.
    let out = cli(
        root.path(),
        &[
            "allocate",
            "--pod",
            "p1",
            "--container",
            "c",
            &format!("{RESOURCE}=1"),
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
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    let allocation = &reply["allocations"][0];
    assert_eq!(allocation["devices"], json!(["Dev-2"]));
    assert_eq!(allocation["envs"]["STUB_DEVICES"], "Dev-2");
    let preferred = stub.event(TIMEOUT, "preferred", |_| true).await;
    assert_eq!(preferred["size"], 1);
    assert_eq!(preferred["chosen"], json!(["Dev-2"]));
    let allocate = stub.event(TIMEOUT, "allocate", |_| true).await;
    assert_eq!(allocate["devices"], json!(["Dev-2"]));

    // An agent restart re-creates kubelet.sock and removes the stub's socket,
    // as the kubelet does; the stub restarts and registers again on its own
    // schedule (its first retry is 10 s later, through its own watch, which
    // reports nothing). The allocation is kept.
    signal(&agent, "-TERM").await;
    assert_eq!(agent.wait(TIMEOUT).await, Some(0));
    agent = ready_agent(root.path()).await;
    let back = eventually(
        "the stub back on the new agent",
        Duration::from_secs(60),
        || async {
            let status = status_json(root.path()).await?;
            let r = status["resources"]
                .as_array()?
                .iter()
                .find(|r| r["name"] == RESOURCE)?
                .clone();
            let ok =
                r["allocatable"] == 2 && r["instances"].as_array().is_some_and(|i| i.len() == 1);
            ok.then_some(r)
        },
    )
    .await;
    assert_eq!(back["allocated"], 1, "the allocation survived the restart");
    drop(agent);
}

const GO_DRIVER: &str = "gpu.go.example.com";

fn go_driver(root: &Path, driver: &str, extra: &[&str]) -> GoProcess {
    let registry = root.join("plugins_registry");
    let data = root.join("plugins").join(driver);
    let mut args = vec![
        "--driver-name".to_string(),
        driver.to_string(),
        "--registry-dir".to_string(),
        arg(&registry).to_string(),
        "--plugin-dir".to_string(),
        arg(&data).to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    GoProcess::start("dra-driver", args)
}

fn connected_instances(d: &Value) -> usize {
    d["instances"].as_array().map_or(0, |list| {
        list.iter().filter(|i| i["connected"] == true).count()
    })
}

async fn dra(root: &Path, verb: &str, driver: &str, claim: &str) -> (bool, Value, String) {
    let out = cli(
        root,
        &[
            "dra", verb, "--driver", driver, "--claim", claim, "-o", "json",
        ],
    )
    .await;
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.success(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_helper_dra_driver_registers_prepares_and_unprepares_through_our_agent_in_both_versions()
 {
    let root = tempfile::tempdir().unwrap();
    let _agent = ready_agent(root.path()).await;
    for (driver, only_v1beta1) in [(GO_DRIVER, false), ("gpu-beta.go.example.com", true)] {
        let mut extra = vec!["--claims", "default/claim-1/uid-1"];
        if only_v1beta1 {
            extra.push("--v1=false");
        }
        let mut go = go_driver(root.path(), driver, &extra);
        let status = go.event(TIMEOUT, "registration_status", |_| true).await;
        assert_eq!(status["registered"], true, "{status}");
        let d = dra_driver_when(root.path(), driver, |d| {
            connected_instances(d) == 1
                && d["devices"]
                    .as_array()
                    .is_some_and(|v| v.len() == 4 && v.iter().all(|h| h["health"] == "Healthy"))
        })
        .await;
        let service = if only_v1beta1 {
            "v1beta1.DRAPlugin"
        } else {
            "v1.DRAPlugin"
        };
        assert_eq!(d["instances"][0]["service"], service);

        let (ok, json, stderr) = dra(root.path(), "prepare", driver, "default/claim-1/uid-1").await;
        assert!(ok, "{stderr}");
        let claim = &json["claims"][0];
        assert_eq!(claim["error"], Value::Null, "{json}");
        assert_eq!(claim["devices"][0]["pool"], "node-1");
        assert_eq!(claim["devices"][0]["device"], "gpu-0");
        assert_eq!(
            claim["devices"][0]["cdi_device_ids"],
            json!([format!("{driver}/gpu=gpu-0")])
        );
        let prepared = go.event(TIMEOUT, "prepare", |_| true).await;
        assert_eq!(prepared["uid"], "uid-1");

        // A claim the API server does not know fails in the helper's lookup;
        // the agent reports the driver's error.
        let (ok, _, stderr) = dra(root.path(), "prepare", driver, "default/missing/uid-9").await;
        assert!(!ok);
        assert!(
            stderr.contains("retrieve claim default/missing"),
            "{stderr}"
        );

        let (ok, json, stderr) =
            dra(root.path(), "unprepare", driver, "default/claim-1/uid-1").await;
        assert!(ok, "{stderr}");
        assert_eq!(json["claims"][0]["error"], Value::Null, "{json}");
        let unprepared = go.event(TIMEOUT, "unprepare", |_| true).await;
        assert_eq!(unprepared["uid"], "uid-1");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_update_of_the_go_helper_dra_driver_keeps_prepare_working() {
    let root = tempfile::tempdir().unwrap();
    let _agent = ready_agent(root.path()).await;
    let claims = "default/claim-1/uid-1,default/claim-2/uid-2";
    let mut old = go_driver(
        root.path(),
        GO_DRIVER,
        &["--instance", "pod-a", "--claims", claims],
    );
    old.event(TIMEOUT, "registration_status", |v| v["registered"] == true)
        .await;
    let mut new = go_driver(
        root.path(),
        GO_DRIVER,
        &["--instance", "pod-b", "--claims", claims],
    );
    new.event(TIMEOUT, "registration_status", |v| v["registered"] == true)
        .await;
    dra_driver_when(root.path(), GO_DRIVER, |d| connected_instances(d) == 2).await;

    // Calls go to the newest instance.
    let (ok, _, stderr) = dra(root.path(), "prepare", GO_DRIVER, "default/claim-1/uid-1").await;
    assert!(ok, "{stderr}");
    new.event(TIMEOUT, "prepare", |v| v["uid"] == "uid-1").await;
    assert!(
        old.seen("prepare").is_empty(),
        "the old instance was called"
    );

    // The old instance leaves; nothing fails, the new one serves.
    old.close_stdin();
    assert_eq!(old.wait(TIMEOUT).await, Some(0));
    dra_driver_when(root.path(), GO_DRIVER, |d| {
        connected_instances(d) == 1
            && d["instances"]
                .as_array()
                .is_some_and(|list| list.len() == 1)
    })
    .await;
    let (ok, _, stderr) = dra(root.path(), "prepare", GO_DRIVER, "default/claim-2/uid-2").await;
    assert!(ok, "{stderr}");
    new.event(TIMEOUT, "prepare", |v| v["uid"] == "uid-2").await;
}

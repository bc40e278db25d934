//! An SDK DRA driver killed at each step of a prepare, as the kubelet's
//! call is running (`NODEPLUGINS_SDK_STOP_AT` stops it there, then it is
//! SIGKILLed), against a real kube-apiserver: restarted, it releases what
//! the claim was allocated on unprepare, its CDI spec file is gone, and the
//! claim can be prepared afresh.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::claims::{allocated_claim, pod_using};
use common::*;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use nodeplugins_sdk::dra_driver::{STOP_AT_ENV, Step};
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const NODE: &str = "node-1";
const DRIVER: &str = "dra.example.com";

/// `example-dra-driver` in the cluster, logging JSON to `log`; stopped at
/// `step` if given.
fn driver(api: &KubeApi, root: &Path, log: &Path, step: Option<Step>) -> Child {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    command
        .arg("--root-dir")
        .arg(root)
        .arg("--kubeconfig")
        .arg(api.node_kubeconfig())
        .args(["--node-name", NODE, "--log-format", "json"])
        .arg("--cdi-dir")
        .arg(root.join("cdi"))
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .kill_on_drop(true);
    if let Some(step) = step {
        command.env(STOP_AT_ENV, step.name());
    }
    command.spawn().unwrap()
}

/// The fields of each JSON line of the driver's log.
fn log_lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["fields"].clone())
        .collect()
}

/// The driver's `unprepared` log lines for claim `uid`.
fn unprepared(log: &Path, uid: &str) -> Vec<Value> {
    log_lines(log)
        .into_iter()
        .filter(|l| l["message"] == "unprepared" && l["claim"] == uid)
        .collect()
}

fn cdi_spec(root: &Path, uid: &str) -> PathBuf {
    root.join(format!("cdi/dra.example.com-gpu_{uid}.json"))
}

async fn connected(root: &Path) {
    dra_driver_when(root, DRIVER, |d| d["instances"][0]["connected"] == true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_killed_at_any_step_of_a_prepare_releases_the_claim_on_unprepare() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(NODE).await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
    api.admin("POST", "/api/v1/nodes", Some(&node)).await;
    let root = tempfile::tempdir().unwrap();
    let _agent = agent_with(root.path(), &["--log-level", "warn"]);
    let log = root.path().join("driver.log");

    for step in Step::ALL {
        let name = format!("claim-{}", step.name());
        let uid = allocated_claim(&api, &name, NODE, DRIVER, "gpu-1").await;
        pod_using(&api, &name, NODE).await;
        let claim = format!("default/{name}/{uid}");

        // Stopped at the step while the prepare runs, then killed.
        let mut stopped = driver(&api, root.path(), &log, Some(step));
        connected(root.path()).await;
        let prepare = {
            let (root, claim) = (root.path().to_owned(), claim.clone());
            tokio::spawn(async move {
                cli(
                    &root,
                    &["dra", "prepare", "--driver", DRIVER, "--claim", &claim],
                )
                .await
            })
        };
        let line = format!("nodeplugins-sdk: stopped at {}", step.name());
        eventually(&line, TIMEOUT, || async {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains(&line)
                .then_some(())
        })
        .await;
        stopped.kill().await.unwrap();
        let failed = prepare.await.unwrap();
        assert!(
            !failed.status.success(),
            "{step:?}: the kubelet heard no answer"
        );

        // Restarted, it releases what was allocated to the claim.
        let _restarted = driver(&api, root.path(), &log, None);
        connected(root.path()).await;
        let out = cli(
            root.path(),
            &["dra", "unprepare", "--driver", DRIVER, "--claim", &claim],
        )
        .await;
        assert!(
            out.status.success(),
            "{step:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let released = unprepared(&log, &uid);
        assert_eq!(released.len(), 1, "{step:?}: {released:?}");
        assert_eq!(
            released[0]["devices"], "[\"gpu-1\"]",
            "{step:?}: the allocated GPU is released: {released:?}"
        );
        let state = if step == Step::Saved {
            "Prepared"
        } else {
            "Interrupted"
        };
        assert_eq!(released[0]["state"], state, "{step:?}");
        assert!(!cdi_spec(root.path(), &uid).exists(), "{step:?}");

        // Nothing is left recorded: the claim is prepared afresh.
        let prepared_before = log_lines(&log)
            .iter()
            .filter(|l| l["message"] == "prepared" && l["claim"] == uid.as_str())
            .count();
        let out = cli(
            root.path(),
            &["dra", "prepare", "--driver", DRIVER, "--claim", &claim],
        )
        .await;
        assert!(out.status.success(), "{step:?}");
        let prepared_after = log_lines(&log)
            .iter()
            .filter(|l| l["message"] == "prepared" && l["claim"] == uid.as_str())
            .count();
        assert_eq!(
            prepared_after,
            prepared_before + 1,
            "{step:?}: prepared again"
        );
        assert!(cdi_spec(root.path(), &uid).exists(), "{step:?}");
        cli(
            root.path(),
            &["dra", "unprepare", "--driver", DRIVER, "--claim", &claim],
        )
        .await;
    }
}

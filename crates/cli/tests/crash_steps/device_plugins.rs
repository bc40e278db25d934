//! Device plugins (registering through kubelet.sock).

use std::path::{Path, PathBuf};

use nodeplugins::admin::AdminClientError;
use nodeplugins::device::AllocationRequest;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

use super::common::{cli, resource_when, signal};
use super::{agent_up, expect_crash};

const RESOURCE: &str = "python.example.com/dev";

fn device_plugin(dir: &Path, extra: &[&str]) -> ChildProcess {
    let mut command = python_env().script("device_plugin.py");
    command
        .arg("--dir")
        .arg(dir)
        .args(["--socket-name", "crash.sock"])
        .args(extra);
    ChildProcess::spawn("device_plugin.py", command)
}

/// The resource's entry in `status -o json` once `pred` holds.
async fn resource(root: &Path, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    resource_when(root, RESOURCE, pred).await
}

async fn allocate(root: &Path, pod: &str) -> Result<Vec<String>, AdminClientError> {
    let request = AllocationRequest::new(pod, "default", pod, "main").resource(RESOURCE, 1);
    let reply = nodeplugins::admin::allocate(root, &request).await?;
    Ok(reply.allocations[0].devices.clone())
}

struct DeviceNode {
    root: tempfile::TempDir,
    dir: PathBuf,
    _agent: ChildProcess,
}

impl DeviceNode {
    async fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let agent = agent_up(root.path()).await;
        let dir = root.path().join("device-plugins");
        Self {
            root,
            dir,
            _agent: agent,
        }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    /// Restarts the plugin normally (after removing its stale socket) and
    /// waits for all its devices to be healthy again.
    async fn restart_plugin(&self, extra: &[&str]) -> ChildProcess {
        std::fs::remove_file(self.dir.join("crash.sock")).unwrap();
        let mut plugin = device_plugin(&self.dir, extra);
        plugin.wait_for_line(TIMEOUT, |l| l == "REGISTERED").await;
        resource(self.root(), |r| r["allocatable"] == 3).await;
        plugin
    }
}

/// A device plugin crashing in an allocation call (the second one, so that
/// the first allocation is there to be kept): the allocation fails, nothing
/// stays reserved or recorded, the first allocation keeps its device, and
/// after a restart the failed pod gets a device.
async fn device_call_crash(step: &str, extra: &[&str]) -> String {
    let node = DeviceNode::start().await;
    let crash_at = format!("{step}:2");
    let mut args = vec!["--crash-at", &crash_at];
    args.extend_from_slice(extra);
    let mut plugin = device_plugin(&node.dir, &args);
    plugin.wait_for_line(TIMEOUT, |l| l == "REGISTERED").await;
    resource(node.root(), |r| r["allocatable"] == 3).await;
    let first = allocate(node.root(), "pod-a").await.unwrap();

    let error = allocate(node.root(), "pod-b")
        .await
        .unwrap_err()
        .to_string();
    expect_crash(plugin, step).await;
    let r = resource(node.root(), |r| r["allocatable"] == 0).await;
    assert_eq!(r["allocated"], 1, "only pod-a holds a device");
    assert_eq!(
        r["reserved"], 0,
        "the failed allocation's reservation is released"
    );

    let _plugin = node.restart_plugin(extra).await;
    assert_eq!(allocate(node.root(), "pod-a").await.unwrap(), first);
    let second = allocate(node.root(), "pod-b").await.unwrap();
    assert_ne!(second, first, "a held device is not given twice");
    error
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugin_crashing_before_its_first_device_list_gets_no_allocations_until_restarted()
{
    let node = DeviceNode::start().await;
    let plugin = device_plugin(&node.dir, &["--crash-at", "list-and-watch"]);
    expect_crash(plugin, "list-and-watch").await;
    let r = resource(node.root(), |r| r["instances"] == serde_json::json!([])).await;
    assert_eq!(r["allocatable"], 0);
    let error = allocate(node.root(), "pod-a")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains(RESOURCE), "{error}");

    let _plugin = node.restart_plugin(&[]).await;
    allocate(node.root(), "pod-a").await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugin_crashing_mid_stream_turns_its_devices_unhealthy_and_keeps_allocations() {
    let node = DeviceNode::start().await;
    let mut plugin = device_plugin(&node.dir, &["--crash-at", "list-and-watch:2"]);
    plugin.wait_for_line(TIMEOUT, |l| l == "REGISTERED").await;
    resource(node.root(), |r| r["allocatable"] == 3).await;
    let held = allocate(node.root(), "pod-a").await.unwrap();

    signal(&plugin, "-USR1").await; // the second device list: the crash
    expect_crash(plugin, "list-and-watch").await;
    let r = resource(node.root(), |r| r["allocatable"] == 0).await;
    assert_eq!(
        r["capacity"], 3,
        "the devices stay known during the grace period"
    );
    assert_eq!(r["allocated"], 1);
    assert!(allocate(node.root(), "pod-b").await.is_err());

    let _plugin = node.restart_plugin(&[]).await;
    assert_eq!(allocate(node.root(), "pod-a").await.unwrap(), held);
    assert_ne!(allocate(node.root(), "pod-b").await.unwrap(), held);

    // `events` tells the story in order.
    let out = cli(node.root(), &["events", "-o", "json"]).await;
    let kinds: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["source"] == "device" && e["resource"] == RESOURCE)
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    let story = [
        "connected",
        "devices_changed",
        "allocated",
        "disconnected",
        "allocation_failed",
        "connected",
        "devices_changed",
        "allocated",
    ];
    let mut rest = kinds.iter();
    for step in story {
        assert!(
            rest.any(|k| k == step),
            "{step} missing or out of order in {kinds:?}"
        );
    }
    // pod-a asking again gets what it holds: nothing is allocated, so
    // nothing is announced; only pod-a's first and pod-b's allocation are.
    assert_eq!(
        kinds.iter().filter(|k| *k == "allocated").count(),
        2,
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugin_hanging_before_its_first_device_list_blocks_nothing_else() {
    let node = DeviceNode::start().await;
    let mut hung = device_plugin(&node.dir, &["--hang-at", "list-and-watch"]);
    hung.wait_for_line(TIMEOUT, |l| l == "HANG list-and-watch")
        .await;
    let r = resource(node.root(), |r| {
        r["instances"].as_array().is_some_and(|i| i.len() == 1)
    })
    .await;
    assert_eq!(r["capacity"], 0, "no devices until the plugin lists them");
    let error = allocate(node.root(), "pod-a")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains(RESOURCE), "{error}");

    // Another plugin registers and is used while the first one hangs.
    let mut other = device_plugin(
        &node.dir,
        &[
            "--socket-name",
            "other.sock",
            "--resource",
            "python.example.com/other",
        ],
    );
    other.wait_for_line(TIMEOUT, |l| l == "REGISTERED").await;
    eventually("the other resource", TIMEOUT, || async {
        let request = AllocationRequest::new("pod-b", "default", "pod-b", "main")
            .resource("python.example.com/other", 1);
        nodeplugins::admin::allocate(node.root(), &request)
            .await
            .ok()
    })
    .await;

    // Killing the hung plugin ends its instance.
    hung.kill().await;
    resource(node.root(), |r| r["instances"] == serde_json::json!([])).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugin_crashing_in_get_preferred_allocation_fails_only_that_allocation() {
    let error = device_call_crash("preferred", &[]).await;
    assert!(
        error.contains("device plugin GetPreferredAllocation rpc failed with err:"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugin_crashing_in_allocate_fails_only_that_allocation() {
    let error = device_call_crash("allocate", &[]).await;
    assert!(
        error.contains("Allocate failed for python.example.com/dev"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugin_crashing_in_pre_start_container_fails_only_that_allocation() {
    let error = device_call_crash("pre-start", &["--pre-start"]).await;
    assert!(
        error.contains("device plugin PreStartContainer rpc failed with err:"),
        "{error}"
    );
}

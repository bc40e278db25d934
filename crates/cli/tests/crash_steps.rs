//! Plugins that crash at each step of their protocols, against `nodeplugins
//! run`. The plugins are grpcio processes that exit on the spot inside the
//! chosen call (`--crash-at STEP[:N]`), leaving their sockets behind, or
//! block in it forever (`--hang-at STEP[:N]`). Each
//! case checks that the agent keeps running, that its state says what
//! happened, that nothing recorded before the crash is lost, and that the
//! plugin, restarted on the same socket, works again.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::{Path, PathBuf};

use nodeplugins::admin::{AdminClientError, DraPrepareReply, DraUnprepareReply};
use nodeplugins::device::AllocationRequest;
use nodeplugins::dra::ClaimRef;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

/// Starts a grpcio plugin script and waits for it to crash at `step`.
async fn expect_crash(mut plugin: ChildProcess, step: &str) {
    let step = step.split(':').next().unwrap().to_string();
    plugin
        .wait_for_line(TIMEOUT, |l| l == format!("CRASH {step}"))
        .await;
    assert_eq!(plugin.wait(TIMEOUT).await, Some(3), "it crashed at {step}");
}

async fn agent_up(root: &Path) -> ChildProcess {
    let agent = agent(root);
    eventually("agent answering", TIMEOUT, || status_json(root)).await;
    agent
}

// ---------------------------------------------------------------------------
// Registration (a CSI plugin serving Registration and CSI on one socket).

const CSI_NAME: &str = "py.example.com";

fn csi_plugin(socket: &Path, crash_at: Option<&str>) -> ChildProcess {
    let mut command = python_env().script("registration_server.py");
    command
        .arg(socket)
        .args(["--type", "CSIPlugin", "--name", CSI_NAME]);
    if let Some(step) = crash_at {
        command.args(["--crash-at", step]);
    }
    ChildProcess::spawn("registration_server.py", command)
}

async fn csi_drivers(root: &Path) -> Vec<String> {
    let status = status_json(root).await.unwrap();
    status["csi_drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

/// Crashes a CSI plugin at `step`, checks the state `check` expects, then
/// restarts it on the same socket and sees it registered exactly once.
/// Returns the plugin's row after the crash, and the CSI drivers then.
async fn csi_crash(
    step: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> (serde_json::Value, Vec<String>) {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent_up(root.path()).await;
    let registry = root.path().join("plugins_registry");
    let socket = registry.join("crash-reg.sock");
    expect_crash(csi_plugin(&socket, Some(step)), step).await;
    let after_crash = plugin_when(root.path(), &socket, &check).await;
    let drivers_after_crash = csi_drivers(root.path()).await;
    assert!(socket.exists(), "a crash leaves the socket behind");

    // The plugin's restart removes its stale socket and listens again.
    std::fs::remove_file(&socket).unwrap();
    let mut again = csi_plugin(&socket, None);
    let line = again
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY"))
        .await;
    assert_eq!(line, r#"NOTIFY {"registered": true, "error": ""}"#);
    plugin_when(root.path(), &socket, |r| {
        r["state"] == "registered" && r["error"].is_null()
    })
    .await;
    assert_eq!(csi_drivers(root.path()).await, [CSI_NAME]);
    (after_crash, drivers_after_crash)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_crashing_in_get_info_is_failed_and_registers_when_restarted() {
    let (row, _) = csi_crash("get-info", |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(error.starts_with("RegisterPlugin error --"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csi_plugin_crashing_in_node_get_info_is_not_a_driver_and_registers_when_restarted() {
    let (row, _) = csi_crash("node-get-info", |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(error.contains("NodeGetInfo"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_crashing_in_notify_is_failed_forgotten_and_registers_when_restarted() {
    // As upstream: a plugin that cannot be told it is registered is not
    // kept. The handler forgets it (no CSI driver is left behind) and the
    // restarted plugin registers afresh.
    let (row, drivers) = csi_crash("notify", |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(
        error.contains("failed to send registration status"),
        "{error}"
    );
    assert!(drivers.is_empty(), "the handler forgot it: {drivers:?}");
}

// ---------------------------------------------------------------------------
// Device plugins (registering through kubelet.sock).

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
        "allocated",
    ];
    let mut rest = kinds.iter();
    for step in story {
        assert!(
            rest.any(|k| k == step),
            "{step} missing or out of order in {kinds:?}"
        );
    }
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

// ---------------------------------------------------------------------------
// DRA drivers.

const DRA_NAME: &str = "crash.dra.example.com";

struct DraNode {
    root: tempfile::TempDir,
    registration: PathBuf,
    service: PathBuf,
    _agent: ChildProcess,
}

impl DraNode {
    async fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let agent = agent_up(root.path()).await;
        let plugins = root.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        Self {
            registration: root
                .path()
                .join(format!("plugins_registry/{DRA_NAME}-reg.sock")),
            service: plugins.join("crash-dra.sock"),
            root,
            _agent: agent,
        }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    fn driver(&self, crash_at: Option<&str>) -> ChildProcess {
        let mut command = python_env().script("dra_driver.py");
        command
            .arg("--registration-socket")
            .arg(&self.registration)
            .arg("--service-socket")
            .arg(&self.service)
            .args(["--name", DRA_NAME]);
        if let Some(step) = crash_at {
            command.args(["--crash-at", step]);
        }
        ChildProcess::spawn("dra_driver.py", command)
    }

    /// Removes the stale sockets, starts the driver normally and waits until
    /// it is registered and connected.
    async fn restart_driver(&self) -> ChildProcess {
        for socket in [&self.registration, &self.service] {
            std::fs::remove_file(socket).unwrap();
        }
        let mut driver = self.driver(None);
        driver
            .wait_for_line(TIMEOUT, |l| l == "NOTIFY registered=True error=")
            .await;
        self.entry(|d| d["instances"][0]["connected"] == true).await;
        driver
    }

    /// The driver's entry in `dra drivers -o json` once `pred` holds.
    async fn entry(&self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        dra_driver_when(self.root(), DRA_NAME, pred).await
    }

    /// Starts the driver crashing at `crash_at` and waits until it is
    /// registered and connected.
    async fn running_driver(&self, crash_at: &str) -> ChildProcess {
        let mut driver = self.driver(Some(crash_at));
        driver
            .wait_for_line(TIMEOUT, |l| l == "NOTIFY registered=True error=")
            .await;
        self.entry(|d| d["instances"][0]["connected"] == true).await;
        driver
    }

    async fn prepare(&self, uid: &str) -> Result<DraPrepareReply, String> {
        let claims = vec![claim(uid)];
        nodeplugins::admin::dra_prepare(self.root(), DRA_NAME, claims, None)
            .await
            .map_err(|e| e.to_string())
    }

    async fn unprepare(&self, uid: &str) -> Result<DraUnprepareReply, String> {
        let claims = vec![claim(uid)];
        nodeplugins::admin::dra_unprepare(self.root(), Some(DRA_NAME), claims)
            .await
            .map_err(|e| e.to_string())
    }
}

fn claim(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        name: format!("claim-{uid}"),
        uid: uid.into(),
    }
}

/// The error a prepare or unprepare reply carries for its one claim, or the
/// error of the call as a whole.
fn claim_error<T: serde::Serialize>(reply: Result<T, String>) -> Option<String> {
    match reply {
        Err(e) => Some(e),
        Ok(reply) => {
            let json = serde_json::to_value(reply).unwrap();
            json["claims"][0]["error"].as_str().map(str::to_string)
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_driver_crashing_in_get_info_is_failed_and_registers_when_restarted() {
    let node = DraNode::start().await;
    expect_crash(node.driver(Some("get-info")), "get-info").await;
    let row = plugin_when(node.root(), &node.registration, |r| r["state"] == "failed").await;
    assert!(
        row["error"]
            .as_str()
            .unwrap()
            .starts_with("RegisterPlugin error --")
    );

    let _driver = node.restart_driver().await;
    assert_eq!(claim_error(node.prepare("u1").await), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_driver_crashing_in_notify_is_forgotten_and_works_when_restarted() {
    // As upstream: the instance the plugin could not be told about is
    // deregistered again, and its driver's cleanup scheduled.
    let node = DraNode::start().await;
    expect_crash(node.driver(Some("notify")), "notify").await;
    let row = plugin_when(node.root(), &node.registration, |r| r["state"] == "failed").await;
    let error = row["error"].as_str().unwrap();
    assert!(
        error.contains("failed to send registration status"),
        "{error}"
    );
    let d = node
        .entry(|d| d["instances"].as_array().is_some_and(|i| i.is_empty()))
        .await;
    assert!(
        d["pending_cleanup"]["in_ms"].is_u64(),
        "cleanup is scheduled: {d}"
    );

    let _driver = node.restart_driver().await;
    let d = node
        .entry(|d| d["instances"].as_array().is_some_and(|i| i.len() == 1))
        .await;
    assert!(d["pending_cleanup"].is_null(), "cleanup cancelled: {d}");
    assert_eq!(claim_error(node.prepare("u1").await), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_driver_crashing_in_prepare_fails_that_claim_and_prepares_it_when_restarted() {
    let node = DraNode::start().await;
    let driver = node.running_driver("prepare:2").await;
    assert_eq!(claim_error(node.prepare("u1").await), None);

    let error = claim_error(node.prepare("u2").await).expect("the crash fails the prepare");
    assert!(error.contains("NodePrepareResources"), "{error}");
    expect_crash(driver, "prepare").await;
    let d = node
        .entry(|d| d["instances"][0]["connected"] == false)
        .await;
    assert!(
        d["pending_cleanup"]["in_ms"].is_u64(),
        "cleanup is scheduled: {d}"
    );

    let _driver = node.restart_driver().await;
    assert_eq!(claim_error(node.prepare("u2").await), None);
    assert_eq!(claim_error(node.unprepare("u1").await), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_driver_crashing_in_unprepare_fails_that_claim_and_unprepares_it_when_restarted() {
    let node = DraNode::start().await;
    let driver = node.running_driver("unprepare").await;
    assert_eq!(claim_error(node.prepare("u1").await), None);

    let error = claim_error(node.unprepare("u1").await).expect("the crash fails the unprepare");
    assert!(error.contains("NodeUnprepareResources"), "{error}");
    expect_crash(driver, "unprepare").await;

    let _driver = node.restart_driver().await;
    assert_eq!(claim_error(node.unprepare("u1").await), None);
}

//! DRA drivers (registering through plugins_registry).

use std::path::{Path, PathBuf};

use nodeplugins::admin::{DraPrepareReply, DraUnprepareReply};
use nodeplugins::dra::ClaimRef;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::TIMEOUT;

use super::common::{dra_driver_when, plugin_when};
use super::{agent_up, expect_crash};

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

//! Pod-level DRA with the real consumers in the loop: the real scheduler
//! allocates claims from the example drivers' ResourceSlices and binds the
//! pod, the controller-manager makes its claim from a template, and the
//! kubelet's own DRA manager (`interop/cmd/kubelet-dra`) and our agent's
//! `dra prepare --pod` then prepare the same pod through the same driver:
//! each container must get the same, non-empty CDI ids from both. And the
//! kubelet's DRA manager reports a device whose driver's health checker
//! stopped as `Unknown` (`health.rs`).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod admin_claims;
mod extended_resources;
mod health;
mod templates;

use common::cluster_drivers::Driver;
use common::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodeplugins_test_support::control_plane::ControlPlane;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::Child;

const NODE: &str = "node-1";
const DRIVER: &str = "dra.example.com";
const CLASS: &str = "gpu.example.com";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

/// The kubelet's DRA manager (`interop/cmd/kubelet-dra`) as node `NODE`,
/// watching `<root>/plugins_registry`, with `args` added; once started.
async fn kubelet_dra(api: &KubeApi, root: &Path, args: &[&str]) -> GoProcess {
    let kubeconfig = api.node_kubeconfig();
    let registry = root.join("plugins_registry");
    let state = root.join("kubelet-dra");
    let mut command = vec![
        "--registry-dir",
        registry.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--node-name",
        NODE,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    command.extend_from_slice(args);
    let mut kubelet = GoProcess::start("kubelet-dra", command);
    kubelet.event(TIMEOUT, "started", |_| true).await;
    kubelet
}

/// A node with an API server, scheduler and controller-manager, the
/// kubelet's DRA manager and our agent both watching its
/// `plugins_registry`, and a DRA driver publishing four GPUs.
struct Cluster {
    // Dropped first: the processes before the fixture's directories.
    _driver: Child,
    kubelet: GoProcess,
    agent: ChildProcess,
    _control: Option<ControlPlane>,
    api: KubeApi,
    root: TempDir,
    driver_log: PathBuf,
}

impl Cluster {
    /// A cluster with `driver`; with the scheduler and controller-manager
    /// if `consumers`, else pods must be placed and claims allocated by hand.
    async fn start(driver: Driver, consumers: bool) -> Self {
        nodeplugins_test_support::init_tracing();
        let api = KubeApi::start(NODE).await;
        let control = if consumers {
            Some(ControlPlane::start(&api).await)
        } else {
            None
        };
        api.create_schedulable_node(NODE).await;
        api.ensure_default_service_account("default").await;
        api.create_device_class(CLASS, DRIVER).await;

        let root = tempfile::tempdir().unwrap();
        let kubeconfig = api.node_kubeconfig();
        let kubeconfig = kubeconfig.to_str().unwrap();
        // Both wipe the node's slices at start: started before the driver.
        let mut kubelet = kubelet_dra(&api, root.path(), &[]).await;
        // Pods prepared by hand, to compare with the kubelet's.
        let agent = agent_with(
            root.path(),
            &[
                "--kubeconfig",
                kubeconfig,
                "--node-name",
                NODE,
                "--pods",
                "off",
            ],
        );
        eventually("the agent answers", TIMEOUT, || async {
            status_json(root.path()).await
        })
        .await;

        let driver_log = root.path().join("driver.log");
        let cdi = root.path().join("cdi");
        let running = driver.start(&api, NODE, root.path(), &cdi, &driver_log);
        kubelet
            .event(TIMEOUT, "registered", |e| e["name"] == DRIVER)
            .await;
        dra_driver_when(root.path(), DRIVER, |_| true).await;
        eventually("four GPUs published", TIMEOUT, || async {
            let list = admin(&api, "GET", "/apis/resource.k8s.io/v1/resourceslices", None).await;
            let devices: usize = list["items"]
                .as_array()?
                .iter()
                .filter(|s| s["spec"]["driver"] == DRIVER)
                .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
                .sum();
            (devices == 4).then_some(())
        })
        .await;
        Self {
            _driver: running,
            kubelet,
            agent,
            _control: control,
            api,
            root,
            driver_log,
        }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    /// The claim's CDI spec file, as the example drivers name it.
    fn cdi_spec(&self, claim_uid: &str) -> PathBuf {
        self.root()
            .join("cdi")
            .join(format!("dra.example.com-gpu_{claim_uid}.json"))
    }

    /// `dra prepare --pod default/NAME -o json`: the reply, or the error.
    async fn agent_prepare(&self, name: &str) -> Result<Value, String> {
        let pod = format!("default/{name}");
        let out = cli(
            self.root(),
            &["dra", "prepare", "--pod", &pod, "-o", "json"],
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(reply) if out.status.success() => Ok(reply),
            Ok(reply) => Err(format!("{reply} {stderr}")),
            Err(_) => Err(stderr),
        }
    }

    /// `dra unprepare --pod default/NAME -o json`.
    async fn agent_unprepare(&self, name: &str) -> Value {
        let pod = format!("default/{name}");
        let out = cli(
            self.root(),
            &["dra", "unprepare", "--pod", &pod, "-o", "json"],
        )
        .await;
        assert!(
            out.status.success(),
            "unprepare {pod}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The kubelet's DRA manager prepares pod `default/NAME`: each
    /// container's CDI ids, or the error.
    async fn kubelet_prepare(
        &mut self,
        name: &str,
    ) -> Result<BTreeMap<String, Vec<String>>, String> {
        let reply = self
            .kubelet
            .request(
                TIMEOUT,
                "prepare",
                json!({"namespace": "default", "name": name}),
            )
            .await;
        match reply["error"].as_str() {
            Some("") | None => {
                Ok(serde_json::from_value(reply["response"]["containers"].clone()).unwrap())
            }
            Some(error) => Err(error.to_string()),
        }
    }

    async fn kubelet_unprepare(&mut self, name: &str) {
        let reply = self
            .kubelet
            .request(
                TIMEOUT,
                "unprepare",
                json!({"namespace": "default", "name": name}),
            )
            .await;
        assert_eq!(reply["error"], "", "the kubelet unprepares {name}: {reply}");
    }
}

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

/// Each container's CDI ids from our agent's answer, sorted (the kubelet's
/// order follows its maps).
fn agent_containers(reply: &Value) -> BTreeMap<String, Vec<String>> {
    reply["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut ids: Vec<String> = serde_json::from_value(c["cdi_device_ids"].clone()).unwrap();
            ids.sort();
            (c["name"].as_str().unwrap().to_string(), ids)
        })
        .collect()
}

fn sorted(mut containers: BTreeMap<String, Vec<String>>) -> BTreeMap<String, Vec<String>> {
    containers.values_mut().for_each(|ids| ids.sort());
    containers
}

/// A pod on the scheduler's hands: `claims` are its `spec.resourceClaims`,
/// `containers` (name, `resources.claims`).
fn pod(name: &str, claims: Value, containers: &[(&str, Value)]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(name, claims)| {
            json!({"name": name, "image": "example.invalid/app", "resources": {"claims": claims}})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": false,
            "resourceClaims": claims,
            "containers": containers,
        },
    })
}

async fn delete_pod(api: &KubeApi, name: &str) {
    admin(
        api,
        "DELETE",
        &format!("{PODS}/{name}?gracePeriodSeconds=0"),
        None,
    )
    .await;
}

/// `nodeplugins ARGS -o json` as JSON.
async fn cli_json(root: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let out = cli(root, &args).await;
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

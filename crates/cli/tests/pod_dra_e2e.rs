//! Pod-level DRA with the real consumers in the loop: the real scheduler
//! allocates claims from the example drivers' ResourceSlices and binds the
//! pod, the controller-manager makes its claim from a template, and the
//! kubelet's own DRA manager (`interop/cmd/kubelet-dra`) and our agent's
//! `dra prepare --pod` then prepare the same pod through the same driver:
//! each container must get the same, non-empty CDI ids from both.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::cluster_drivers::{Driver, prepared_devices};
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
        let class = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]},
        });
        admin(
            &api,
            "POST",
            "/apis/resource.k8s.io/v1/deviceclasses",
            Some(&class),
        )
        .await;

        let root = tempfile::tempdir().unwrap();
        let kubeconfig = api.node_kubeconfig();
        let kubeconfig = kubeconfig.to_str().unwrap();
        // Both wipe the node's slices at start: started before the driver.
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
            ],
        );
        kubelet.event(TIMEOUT, "started", |_| true).await;
        let agent = agent_with(
            root.path(),
            &["--kubeconfig", kubeconfig, "--node-name", NODE],
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

/// The template scenario: a claim with a `firstAvailable` request (its
/// first subrequest cannot be met, so the scheduler takes the second) with
/// an opaque configuration for the driver, and a plain request; container
/// `whole` names the claim, `one` its request `gpu`.
async fn template_scenario(driver: Driver) {
    let mut cluster = Cluster::start(driver, true).await;
    let api = &cluster.api;
    let template = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpus"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "firstAvailable": [
                {"name": "big", "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 8},
                {"name": "small", "deviceClassName": CLASS},
            ]},
            {"name": "extra", "exactly": {"deviceClassName": CLASS}},
        ], "config": [
            {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"mode": "shared"}}},
        ]}}},
    });
    let templates = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates";
    admin(api, "POST", templates, Some(&template)).await;
    let train = pod(
        "train",
        json!([{"name": "gpus", "resourceClaimTemplateName": "gpus"}]),
        &[
            ("whole", json!([{"name": "gpus"}])),
            ("one", json!([{"name": "gpus", "request": "gpu"}])),
        ],
    );
    admin(api, "POST", PODS, Some(&train)).await;
    assert_eq!(api.wait_pod_bound("default", "train").await, NODE);
    let bound = admin(api, "GET", &format!("{PODS}/train"), None).await;
    let claim_name = bound["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .unwrap()
        .to_string();
    let claim = admin(api, "GET", &format!("{CLAIMS}/{claim_name}"), None).await;
    let claim_uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    let requests: Vec<&str> = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request"].as_str().unwrap())
        .collect();
    assert_eq!(requests, ["gpu/small", "extra"], "{claim}");

    let kubelet = sorted(cluster.kubelet_prepare("train").await.unwrap());
    let reply = cluster.agent_prepare("train").await.unwrap();
    let ours = agent_containers(&reply);
    assert_eq!(ours, kubelet, "{driver:?}: the same devices per container");
    assert_eq!(ours["whole"].len(), 2, "{driver:?}: {reply}");
    assert_eq!(ours["one"].len(), 1, "{driver:?}: {reply}");
    assert!(ours["whole"].contains(&ours["one"][0]));
    // The driver saw the configuration: the device of request `gpu` (its
    // subrequest `small`) is in shared mode, the other one not.
    let spec: Value =
        serde_json::from_slice(&std::fs::read(cluster.cdi_spec(&claim_uid)).unwrap()).unwrap();
    let mode = |cdi_id: &str| -> Option<String> {
        let name = cdi_id.split_once('=').unwrap().1;
        let device = spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {spec}"));
        device["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.as_str()?.strip_prefix("GPU_MODE="))
            .map(str::to_string)
            .next()
    };
    assert_eq!(mode(&ours["one"][0]).as_deref(), Some("shared"), "{spec}");
    let other = ours["whole"]
        .iter()
        .find(|id| **id != ours["one"][0])
        .unwrap();
    assert_eq!(mode(other), None, "{spec}");
    assert_eq!(prepared_devices(&cluster.driver_log), 2, "prepared once");

    // The pod-resources API reports the same devices per container.
    let listed = cli_json(cluster.root(), &["pod-resources", "--pod", "default/train"]).await;
    for container in listed["pod_resources"]["containers"].as_array().unwrap() {
        let mut ids: Vec<String> = container["dynamic_resources"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["claim_resources"].as_array().unwrap().clone())
            .flat_map(|r| r["cdi_devices"].as_array().unwrap().clone())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        let name = container["name"].as_str().unwrap();
        assert_eq!(ids, ours[name], "pod-resources for {name}: {listed}");
    }

    // The agent restarts between prepare and unprepare, and the pod is
    // deleted: unprepare still reaches the driver, from the records.
    signal(&cluster.agent, "-TERM").await;
    cluster.agent.wait(TIMEOUT).await;
    let kubeconfig = cluster.api.node_kubeconfig();
    cluster.agent = agent_with(
        cluster.root(),
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-name",
            NODE,
        ],
    );
    dra_driver_when(cluster.root(), DRIVER, |d| {
        d["instances"][0]["connected"] == true
    })
    .await;
    delete_pod(&cluster.api, "train").await;
    let unprepared = cluster.agent_unprepare("train").await;
    assert_eq!(
        unprepared["claims"][0]["claim"]["uid"],
        claim_uid.as_str(),
        "{unprepared}"
    );
    assert_eq!(unprepared["claims"][0]["unprepared"], true, "{unprepared}");
    assert!(
        !cluster.cdi_spec(&claim_uid).exists(),
        "{driver:?}: the CDI spec is gone"
    );
    cluster.kubelet_unprepare("train").await;
    let claims = cli_json(cluster.root(), &["dra", "claims"]).await;
    assert_eq!(claims["claims"], json!([]), "nothing left prepared");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_driver_gives_each_container_what_the_kubelet_gives_it() {
    template_scenario(Driver::Example).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_helper_driver_gives_each_container_what_the_kubelet_gives_it() {
    template_scenario(Driver::GoHelper).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_guides_driver_gives_each_container_what_the_kubelet_gives_it() {
    template_scenario(Driver::Guide).await;
}

/// A pod asking for `example.com/gpu`, an extended resource a DeviceClass
/// backs: the scheduler makes the pod's claim and maps its requests to the
/// containers (`status.extendedResourceClaimStatus`); the kubelet's DRA
/// manager and our agent give the same devices to the container that asks.
#[tokio::test(flavor = "multi_thread")]
async fn an_extended_resource_a_device_class_backs_reaches_the_container_that_asks() {
    let mut cluster = Cluster::start(Driver::Example, true).await;
    let api = &cluster.api;
    let class = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "extended.example.com"},
        "spec": {
            "selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}],
            "extendedResourceName": "example.com/gpu",
        },
    });
    admin(
        api,
        "POST",
        "/apis/resource.k8s.io/v1/deviceclasses",
        Some(&class),
    )
    .await;
    let gpus = json!({"example.com/gpu": "2"});
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "extended"},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [
                {"name": "main", "image": "example.invalid/app",
                    "resources": {"requests": gpus, "limits": gpus}},
                {"name": "side", "image": "example.invalid/app"},
            ],
        },
    });
    admin(api, "POST", PODS, Some(&pod)).await;
    assert_eq!(api.wait_pod_bound("default", "extended").await, NODE);
    let bound = admin(api, "GET", &format!("{PODS}/extended"), None).await;
    let status = &bound["status"]["extendedResourceClaimStatus"];
    let claim_name = status["resourceClaimName"].as_str().unwrap().to_string();
    assert_eq!(
        status["requestMappings"][0]["containerName"], "main",
        "{status}"
    );
    let claim = admin(api, "GET", &format!("{CLAIMS}/{claim_name}"), None).await;
    let claim_uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    let claim_uid = claim_uid.as_str();

    let kubelet = sorted(cluster.kubelet_prepare("extended").await.unwrap());
    let reply = cluster.agent_prepare("extended").await.unwrap();
    let ours = agent_containers(&reply);
    assert_eq!(ours, kubelet, "the same devices per container");
    assert_eq!(ours["main"].len(), 2, "{reply}");
    assert_eq!(ours["side"], Vec::<String>::new(), "{reply}");
    assert!(cluster.cdi_spec(claim_uid).exists());

    delete_pod(&cluster.api, "extended").await;
    let unprepared = cluster.agent_unprepare("extended").await;
    assert_eq!(unprepared["claims"][0]["unprepared"], true, "{unprepared}");
    assert!(!cluster.cdi_spec(claim_uid).exists());
    cluster.kubelet_unprepare("extended").await;
}

/// A claim `name` with one GPU request, as an admin creates it.
async fn plain_claim(api: &KubeApi, name: &str) -> Value {
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
    });
    admin(api, "POST", CLAIMS, Some(&claim)).await
}

/// Pod `name` on the node already (the scheduler leaves it alone), with
/// container `main` using claim `claim` whole.
async fn placed_pod(api: &KubeApi, name: &str, claim: &str) -> String {
    let mut pod = pod(
        name,
        json!([{"name": "gpu", "resourceClaimName": claim}]),
        &[("main", json!([{"name": "gpu"}]))],
    );
    pod["spec"]["nodeName"] = NODE.into();
    let created = admin(api, "POST", PODS, Some(&pod)).await;
    created["metadata"]["uid"].as_str().unwrap().to_string()
}

/// Allocates `claim` to gpu-1 and reserves it for the pods `reserved`
/// (name, UID), as the scheduler would.
async fn allocate(api: &KubeApi, claim: &str, reserved: &[(&str, &str)]) {
    let reserved: Vec<Value> = reserved
        .iter()
        .map(|(name, uid)| json!({"resource": "pods", "name": name, "uid": uid}))
        .collect();
    let status = json!({"status": {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-1"},
        ]}},
        "reservedFor": reserved,
    }});
    admin(
        api,
        "PATCH",
        &format!("{CLAIMS}/{claim}/status"),
        Some(&status),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_whose_claims_may_not_be_prepared_are_refused_naming_the_claim_and_no_driver_is_called()
 {
    // No controller-manager: its resourceclaim controller would reserve a
    // claim for any pod placed on a node that names it.
    let cluster = Cluster::start(Driver::Example, false).await;
    let api = &cluster.api;

    // Not allocated.
    plain_claim(api, "waiting").await;
    placed_pod(api, "early", "waiting").await;
    let error = cluster.agent_prepare("early").await.unwrap_err();
    assert!(
        error.contains("ResourceClaim default/waiting (UID"),
        "{error}"
    );
    assert!(error.contains("not allocated"), "{error}");

    // Allocated, but reserved for another pod.
    plain_claim(api, "theirs").await;
    let owner = placed_pod(api, "owner", "theirs").await;
    placed_pod(api, "intruder", "theirs").await;
    allocate(api, "theirs", &[("owner", &owner)]).await;
    let error = cluster.agent_prepare("intruder").await.unwrap_err();
    assert!(
        error.contains("not allowed to use ResourceClaim default/theirs"),
        "{error}"
    );

    assert_eq!(
        prepared_devices(&cluster.driver_log),
        0,
        "no driver was called"
    );

    // Replaced: prepared for one pod, then deleted and made again under the
    // same name for another while the first still holds it.
    plain_claim(api, "reused").await;
    let first = placed_pod(api, "first", "reused").await;
    allocate(api, "reused", &[("first", &first)]).await;
    cluster.agent_prepare("first").await.unwrap();
    let prepared = prepared_devices(&cluster.driver_log);
    admin(api, "DELETE", &format!("{CLAIMS}/reused"), None).await;
    eventually("the claim is gone", TIMEOUT, || async {
        let found = api
            .request(Identity::Admin, "GET", &format!("{CLAIMS}/reused"), None)
            .await;
        (found.status == 404).then_some(())
    })
    .await;
    let again = plain_claim(api, "reused").await;
    let second = placed_pod(api, "second", "reused").await;
    allocate(api, "reused", &[("second", &second)]).await;
    let error = cluster.agent_prepare("second").await.unwrap_err();
    let new_uid = again["metadata"]["uid"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "ResourceClaim default/reused is now UID {new_uid}"
        )),
        "{error}"
    );
    assert_eq!(
        prepared_devices(&cluster.driver_log),
        prepared,
        "no driver was called"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_two_pods_share_is_prepared_once_and_unprepared_with_its_last_pod() {
    let cluster = Cluster::start(Driver::Example, true).await;
    let api = &cluster.api;
    let claim = plain_claim(api, "shared").await;
    let claim_uid = claim["metadata"]["uid"].as_str().unwrap().to_string();
    for name in ["a", "b"] {
        let pod = pod(
            name,
            json!([{"name": "gpu", "resourceClaimName": "shared"}]),
            &[("main", json!([{"name": "gpu"}]))],
        );
        admin(api, "POST", PODS, Some(&pod)).await;
        assert_eq!(api.wait_pod_bound("default", name).await, NODE);
    }
    let a = cluster.agent_prepare("a").await.unwrap();
    let b = cluster.agent_prepare("b").await.unwrap();
    assert_eq!(agent_containers(&a), agent_containers(&b));
    assert_eq!(agent_containers(&a)["main"].len(), 1);
    assert_eq!(prepared_devices(&cluster.driver_log), 1, "prepared once");

    delete_pod(api, "a").await;
    let released = cluster.agent_unprepare("a").await;
    assert_eq!(released["claims"][0]["unprepared"], false, "{released}");
    assert!(cluster.cdi_spec(&claim_uid).exists(), "b still uses it");

    delete_pod(api, "b").await;
    let unprepared = cluster.agent_unprepare("b").await;
    assert_eq!(unprepared["claims"][0]["unprepared"], true, "{unprepared}");
    assert!(!cluster.cdi_spec(&claim_uid).exists());
    let again = cluster.agent_unprepare("b").await;
    assert_eq!(
        again["claims"],
        json!([]),
        "nothing left to unprepare: {again}"
    );
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

//! An SDK DRA driver in a cluster, against a real kube-apiserver with etcd
//! and as the node identity: its ResourceSlices (shape, owner, updates,
//! generations; deleted by the agent after the driver's grace period and
//! published again when it returns), and claims read from the API server
//! when prepared by the kubelet's own DRA client and by our agent: a
//! replaced claim refused, a prepared claim remembered across a SIGKILL,
//! unprepare from the UID alone.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::claims::{allocated_claim, delete_claim, pod_using};
use common::cluster_drivers::{Driver, prepared_devices};
use common::*;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::Device;
use nodeplugins_sdk::dra_driver::{DraDriverServer, Pool, Resources, Slice};
use nodeplugins_test_support::echo_dra_driver::NoCalls;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-1";
const DRIVER: &str = "dra.example.com";

async fn api() -> KubeApi {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(NODE).await;
    for name in [NODE, "node-2"] {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        let created = api
            .request(Identity::Admin, "POST", "/api/v1/nodes", Some(&node))
            .await;
        assert_eq!(created.status, 201, "create {name}: {}", created.body);
    }
    api
}

/// The driver's slices on node-1, sorted by pool and name.
async fn slices(api: &KubeApi) -> Vec<Value> {
    let list = api
        .admin("GET", "/apis/resource.k8s.io/v1/resourceslices", None)
        .await;
    let mut slices: Vec<Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["spec"]["nodeName"] == NODE && s["spec"]["driver"] == DRIVER)
        .cloned()
        .collect();
    slices.sort_by_key(|s| s["metadata"]["name"].as_str().unwrap().to_string());
    slices
}

async fn slices_when(api: &KubeApi, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    eventually(what, TIMEOUT, || async {
        let slices = slices(api).await;
        pred(&slices).then_some(slices)
    })
    .await
}

fn device_names(slice: &Value) -> Vec<&str> {
    slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect()
}

fn gpus(names: &[&str]) -> Vec<Device> {
    names
        .iter()
        .map(|n| Device {
            name: n.to_string(),
            ..Default::default()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn published_slices_have_the_helpers_shape_and_follow_the_devices() {
    let api = api().await;
    let root = tempfile::tempdir().unwrap();
    let resources = Resources::new();
    resources.set_pool(NODE, Pool::new(gpus(&["gpu-0", "gpu-1"])));
    let shutdown = CancellationToken::new();
    let server = DraDriverServer::builder(DRIVER, Arc::new(NoCalls))
        .root_dir(root.path())
        .register(false)
        .kube(api.client(Identity::Node).await, NODE)
        .resources(resources.clone())
        .start(shutdown.clone())
        .await
        .unwrap();

    let published = slices_when(&api, "one slice", |s| s.len() == 1).await;
    let slice = &published[0];
    let node = api
        .admin("GET", &format!("/api/v1/nodes/{NODE}"), None)
        .await;
    // Named as the Go helper names them: the slice's index, the driver, the
    // node.
    assert!(
        slice["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("00000-{DRIVER}-{NODE}-")),
        "{slice}"
    );
    assert_eq!(
        slice["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE,
                "uid": node["metadata"]["uid"], "controller": true}])
    );
    assert_eq!(slice["spec"]["nodeName"], NODE);
    assert_eq!(slice["spec"]["driver"], DRIVER);
    assert_eq!(
        slice["spec"]["pool"],
        json!({"name": NODE, "generation": 1, "resourceSliceCount": 1})
    );
    assert_eq!(device_names(slice), ["gpu-0", "gpu-1"]);
    let first = slice["metadata"]["uid"].clone();

    // One slice changes: updated in place, same generation.
    resources.set_pool(NODE, Pool::new(gpus(&["gpu-0", "gpu-1", "gpu-2"])));
    let updated = slices_when(&api, "three devices", |s| {
        s.len() == 1 && device_names(&s[0]).len() == 3
    })
    .await;
    assert_eq!(
        updated[0]["metadata"]["uid"], first,
        "updated, not replaced"
    );
    assert_eq!(updated[0]["spec"]["pool"]["generation"], 1);

    // A second slice: a new generation, the first updated in place to it,
    // the second created.
    resources.set_pool(
        NODE,
        Pool::from_slices(vec![
            Slice::devices(gpus(&["gpu-0", "gpu-1", "gpu-2"])),
            Slice::devices(gpus(&["gpu-3"])),
        ]),
    );
    let two = slices_when(&api, "two slices of generation 2", |s| {
        s.len() == 2 && s.iter().all(|s| s["spec"]["pool"]["generation"] == 2)
    })
    .await;
    assert!(
        two.iter()
            .all(|s| s["spec"]["pool"]["resourceSliceCount"] == 2)
    );
    assert!(
        two.iter().any(|s| s["metadata"]["uid"] == first),
        "the first slice is kept: {two:?}"
    );
    assert!(two.iter().any(|s| {
        s["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("00001-{DRIVER}-{NODE}-"))
    }));

    // Someone deletes one: it comes back.
    let victim = two[0]["metadata"]["name"].as_str().unwrap().to_string();
    api.admin(
        "DELETE",
        &format!("/apis/resource.k8s.io/v1/resourceslices/{victim}"),
        None,
    )
    .await;
    slices_when(&api, "published again", |s| {
        s.len() == 2 && s.iter().all(|s| s["metadata"]["name"] != victim.as_str())
    })
    .await;

    // The pool goes: its slices go.
    resources.remove_pool(NODE);
    slices_when(&api, "no slices", |s| s.is_empty()).await;
    shutdown.cancel();
    server.wait().await.unwrap();
}

/// One prepare or unprepare of `uid` (claim `name`): the claim's result.
type Call<'a> = Box<dyn FnMut(&'a str, String) -> futures::future::BoxFuture<'a, Value> + 'a>;

/// The answer to `op` of `uid` once the driver is registered. A driver
/// killed and started again re-creates its registration socket at the same
/// path; the client (the kubelet's plugin manager, every second; ours, at
/// once) deregisters the old instance and registers the new one, and a call
/// between the two finds the driver not registered, which is the client's
/// answer, not the call's.
async fn registered_answer(call: &mut Call<'_>, op: &'static str, uid: &str) -> Value {
    eventually(
        &format!("{op} answered by a registered driver"),
        TIMEOUT,
        || {
            let result = call(op, uid.to_string());
            async move {
                let result = result.await;
                let waiting = result["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("not registered"));
                (!waiting).then_some(result)
            }
        },
    )
    .await
}

/// Prepares and unprepares a claim through `call`, as the kubelet would
/// through its DRA client, with the driver killed and restarted between.
async fn claims_scenario(api: &KubeApi, root: &Path, driver: Driver, mut call: Call<'_>) {
    let label = format!("{driver:?}");
    let cdi = root.join("cdi");
    let log = root.join("driver.log");
    let uid = allocated_claim(api, "gpu-claim", NODE, DRIVER, "gpu-1").await;
    pod_using(api, "gpu-claim", NODE).await;
    let mut running = driver.start(api, NODE, root, &cdi, &log);

    // Once the driver is registered.
    let first = registered_answer(&mut call, "prepare", &uid).await;
    assert_eq!(first["error"], Value::Null, "{label}: {first}");
    assert_eq!(first["devices"][0]["device"], "gpu-1", "{label}: {first}");
    assert_eq!(first["devices"][0]["pool"], NODE);
    let cdi_id = format!("{DRIVER}/gpu={uid}-gpu-1");
    assert_eq!(first["devices"][0]["cdi_device_ids"], json!([cdi_id]));
    let spec = cdi.join(format!("dra.example.com-gpu_{uid}.json"));
    assert!(spec.exists(), "{label}: the claim's CDI spec is written");
    assert_eq!(prepared_devices(&log), 1);

    // Killed and restarted, with its CDI spec gone as after a reboot: the
    // spec comes back, and the claim is known without a second prepare.
    running.kill().await.unwrap();
    std::fs::remove_file(&spec).unwrap();
    let _running = driver.start(api, NODE, root, &cdi, &log);
    eventually("the CDI spec written again", TIMEOUT, || async {
        spec.exists().then_some(())
    })
    .await;
    let again = eventually("prepared again", TIMEOUT, || {
        let uid = uid.clone();
        let result = call("prepare", uid);
        async move {
            let result = result.await;
            result["error"].is_null().then_some(result)
        }
    })
    .await;
    assert_eq!(again["devices"], first["devices"], "{label}");
    assert_eq!(
        prepared_devices(&log),
        1,
        "{label}: no device touched again"
    );

    let unprepared = registered_answer(&mut call, "unprepare", &uid).await;
    assert_eq!(unprepared["error"], Value::Null, "{label}: {unprepared}");
    assert!(!spec.exists(), "{label}: the CDI spec is removed");

    // The claim is deleted and created again: the old UID is refused.
    delete_claim(api, "gpu-claim").await;
    let new_uid = allocated_claim(api, "gpu-claim", NODE, DRIVER, "gpu-1").await;
    assert_ne!(new_uid, uid);
    let replaced = registered_answer(&mut call, "prepare", &uid).await;
    // The SDK refuses the claim; the Go helper fails the whole call.
    let error = replaced["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("claim default/gpu-claim got replaced"),
        "{label}: {replaced}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_dra_client_prepares_claims_the_driver_reads_from_the_api() {
    let api = api().await;
    let root = tempfile::tempdir().unwrap();
    let mut kubelet = GoProcess::start(
        "kubelet-plugins",
        [
            "--registry-dir",
            root.path().join("plugins_registry").to_str().unwrap(),
            "--kubelet-sock",
            root.path()
                .join("device-plugins/kubelet.sock")
                .to_str()
                .unwrap(),
        ],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    let kubelet = Arc::new(tokio::sync::Mutex::new(kubelet));
    let call: Call<'_> = Box::new(move |op, uid| {
        let kubelet = kubelet.clone();
        Box::pin(async move {
            let claims = json!([{"namespace": "default", "name": "gpu-claim", "uid": uid}]);
            let mut kubelet = kubelet.lock().await;
            let reply = kubelet
                .request(TIMEOUT, op, json!({"driver": DRIVER, "claims": claims}))
                .await;
            let result = &reply["response"]["claims"][&uid];
            let error = match result["error"].as_str() {
                Some("") | None if reply["error"] == "" => Value::Null,
                Some("") | None => reply["error"].clone(),
                Some(error) => json!(error),
            };
            let devices: Vec<Value> = result["devices"]
                .as_array()
                .map(|d| {
                    d.iter()
                        .map(|d| json!({"device": d["device_name"], "pool": d["pool_name"], "cdi_device_ids": d["cdi_device_ids"]}))
                        .collect()
                })
                .unwrap_or_default();
            json!({"error": error, "devices": devices})
        })
    });
    claims_scenario(&api, root.path(), Driver::Example, call).await;
}

/// The claims scenario with our agent in place of the kubelet, claims
/// prepared by hand (`--pods off`).
async fn agent_scenario(driver: Driver) {
    let api = api().await;
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = api.node_kubeconfig();
    let _agent = agent_with(
        root.path(),
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-name",
            NODE,
            "--pods",
            "off",
        ],
    );
    let root_path: PathBuf = root.path().to_owned();
    let call: Call<'_> = Box::new(move |op, uid| {
        let root = root_path.clone();
        Box::pin(async move {
            let args = ["dra", op, "--driver", DRIVER, "--claim"];
            let claim = format!("default/gpu-claim/{uid}");
            let mut args: Vec<&str> = args.to_vec();
            args.extend([claim.as_str(), "-o", "json"]);
            let out = cli(&root, &args).await;
            let json: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            let result = &json["claims"][0];
            if result.is_null() {
                return json!({"error": String::from_utf8_lossy(&out.stderr).to_string(), "devices": []});
            }
            json!({"error": result["error"], "devices": result["devices"]})
        })
    });
    claims_scenario(&api, root.path(), driver, call).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn our_agent_prepares_claims_the_driver_reads_from_the_api() {
    agent_scenario(Driver::Example).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_guides_cluster_driver_does_the_same() {
    agent_scenario(Driver::Guide).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_guides_go_helper_driver_does_the_same() {
    agent_scenario(Driver::GoHelper).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn slices_wiped_after_the_grace_period_come_back_with_the_driver() {
    let api = api().await;
    // A slice an earlier run left: the agent wipes the node's slices when
    // it starts, as the kubelet does. That wipe runs beside the driver's
    // first publishing (a driver repairs what it removes), so the driver
    // starts once it is done: a cold CI run saw the start-up wipe remove
    // the slices the test had just seen published.
    let stale = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "left-by-an-earlier-run"},
        "spec": {
            "driver": "stale.example.com",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    });
    let created = api
        .request(
            Identity::Admin,
            "POST",
            "/apis/resource.k8s.io/v1/resourceslices",
            Some(&stale),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = api.node_kubeconfig();
    let _agent = agent_with(
        root.path(),
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--node-name",
            NODE,
            // Long enough that the slices are surely still there when the
            // driver's exit has been waited for on a loaded machine, short
            // enough to wait out.
            "--dra-cleanup-grace",
            "8s",
        ],
    );
    eventually("the start-up wipe", TIMEOUT, || async {
        let list = api
            .admin("GET", "/apis/resource.k8s.io/v1/resourceslices", None)
            .await;
        let names: Vec<&str> = list["items"]
            .as_array()?
            .iter()
            .filter_map(|s| s["metadata"]["name"].as_str())
            .collect();
        (!names.contains(&"left-by-an-earlier-run")).then_some(())
    })
    .await;
    let cdi = root.path().join("cdi");
    let log = root.path().join("driver.log");
    let mut driver = Driver::Example.start(&api, NODE, root.path(), &cdi, &log);
    let published = slices_when(&api, "published", |s| !s.is_empty()).await;

    // Stopped for longer than the grace period: the agent wipes its slices.
    let status = Command::new("kill")
        .args(["-TERM", &driver.id().unwrap().to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    driver.wait().await.unwrap();
    assert_eq!(
        slices(&api).await.len(),
        published.len(),
        "a driver that stops leaves its slices to the agent"
    );
    slices_when(&api, "wiped by the agent", |s| s.is_empty()).await;

    // Back: the same devices are published again.
    let _driver = Driver::Example.start(&api, NODE, root.path(), &cdi, &log);
    let again = slices_when(&api, "published again", |s| s.len() == published.len()).await;
    let devices = |slices: &[Value]| -> Vec<String> {
        slices
            .iter()
            .flat_map(device_names)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(devices(&again), devices(&published));
}

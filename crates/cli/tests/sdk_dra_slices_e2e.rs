//! The SDK's ResourceSlice publishing against a real kube-apiserver, and
//! with the real scheduler as the consumer: a pool too large for one slice
//! is split and every slice is allocated from; slices someone else changes
//! are put back; counter sets and pools for other nodes are published as
//! the API takes them; a restarted driver knows its pools for other nodes
//! and moves a pool between this node and others by delete and create;
//! failures reach the driver's handlers (as recoverable) and the counts;
//! and shutdown does not wait for an API server that stopped answering.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::resource::v1::{Counter, CounterSet, Device, DeviceCounterConsumption};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodeplugins_sdk::dra_driver::{DraDriverServer, NodeSelection, Pool, PublishError, Resources};
use nodeplugins_test_support::control_plane::ControlPlane;
use nodeplugins_test_support::echo_dra_driver::NoCalls;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-1";
const DRIVER: &str = "dra.example.com";
const CLASS: &str = "gpu.example.com";
const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

fn gpus(count: usize) -> Vec<Device> {
    (0..count)
        .map(|i| Device {
            name: format!("gpu-{i}"),
            ..Default::default()
        })
        .collect()
}

/// The driver's slices, sorted by name.
async fn slices(api: &KubeApi) -> Vec<Value> {
    let list = api.admin("GET", SLICES, None).await;
    let mut slices: Vec<Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["spec"]["driver"] == DRIVER)
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

fn device_count(slices: &[Value]) -> usize {
    slices
        .iter()
        .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
        .sum()
}

/// An API server with Node `NODE`.
async fn api_with_node() -> KubeApi {
    let api = KubeApi::start(NODE).await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
    api.admin("POST", "/api/v1/nodes", Some(&node)).await;
    api
}

/// A driver publishing `resources` as `identity`, stopped with the token.
async fn publisher(
    api: &KubeApi,
    identity: Identity,
    resources: &Resources,
    errors: Option<Arc<Mutex<Vec<String>>>>,
) -> (DraDriverServer, CancellationToken, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let mut builder = DraDriverServer::builder(DRIVER, Arc::new(NoCalls))
        .root_dir(root.path())
        .register(false)
        .resources(resources.clone())
        .kube(api.client(identity).await, NODE);
    if let Some(errors) = errors {
        builder = builder.on_publish_error(move |e: &PublishError| {
            errors.lock().unwrap().push(e.to_string());
        });
    }
    let server = builder.start(shutdown.clone()).await.unwrap();
    (server, shutdown, root)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_of_300_devices_is_split_and_the_scheduler_allocates_from_every_slice() {
    let (api, _control) = ControlPlane::with_node(NODE, CLASS, DRIVER).await;
    let resources = Resources::new();
    resources.set_pool(NODE, Pool::new(gpus(300)));
    let (_server, _shutdown, _root) = publisher(&api, Identity::Node, &resources, None).await;
    let published = slices_when(&api, "300 devices published", |s| device_count(s) == 300).await;
    let sizes: Vec<usize> = published
        .iter()
        .map(|s| s["spec"]["devices"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [128, 128, 44], "split at the API's limit, in order");

    // Ten pods of 30 GPUs each: every device of every slice is allocated.
    let claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
    for i in 0..11 {
        let count = if i < 10 { 30 } else { 1 };
        api.create_pod_with_claim(&i.to_string(), CLASS, count)
            .await;
        if i < 10 {
            assert_eq!(
                api.wait_pod_bound("default", &format!("pod-{i}")).await,
                NODE
            );
        }
    }
    let mut allocated = BTreeSet::new();
    for i in 0..10 {
        let claim = api.admin("GET", &format!("{claims}/claim-{i}"), None).await;
        for result in claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .unwrap()
        {
            assert!(allocated.insert(result["device"].as_str().unwrap().to_string()));
        }
    }
    assert_eq!(allocated.len(), 300, "every GPU of the three slices");
    let why = api.wait_pod_unschedulable("default", "pod-10").await;
    assert!(!why.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slice_someone_else_changes_is_put_back() {
    let api = api_with_node().await;
    let resources = Resources::new();
    resources.set_pool(NODE, Pool::new(gpus(4)));
    let (_server, _shutdown, _root) = publisher(&api, Identity::Node, &resources, None).await;
    let published = slices_when(&api, "four GPUs", |s| device_count(s) == 4).await;
    let mut changed = published[0].clone();
    changed["spec"]["devices"] = json!([{"name": "gpu-0"}]);
    let name = changed["metadata"]["name"].as_str().unwrap().to_string();
    api.admin("PUT", &format!("{SLICES}/{name}"), Some(&changed))
        .await;
    slices_when(&api, "the four GPUs back", |s| {
        device_count(s) == 4
            && s[0]["metadata"]["resourceVersion"] != changed["metadata"]["resourceVersion"]
    })
    .await;
    assert_eq!(resources.stats().failures, 0);
}

fn counter_set(name: &str) -> CounterSet {
    CounterSet {
        name: name.into(),
        counters: BTreeMap::from([(
            "memory".to_string(),
            Counter {
                value: Quantity("80Gi".into()),
            },
        )]),
    }
}

fn partition(name: &str, set: &str) -> Device {
    Device {
        name: name.into(),
        consumes_counters: Some(vec![DeviceCounterConsumption {
            counter_set: set.into(),
            counters: BTreeMap::from([(
                "memory".to_string(),
                Counter {
                    value: Quantity("40Gi".into()),
                },
            )]),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn counter_sets_and_pools_for_other_nodes_are_published_as_the_api_takes_them() {
    let api = api_with_node().await;
    let resources = Resources::new();
    // Partitions of two GPUs sharing each GPU's memory.
    resources.set_pool(
        NODE,
        Pool::with_counters(
            vec![counter_set("gpu-0"), counter_set("gpu-1")],
            vec![
                partition("gpu-0-a", "gpu-0"),
                partition("gpu-0-b", "gpu-0"),
                partition("gpu-1-a", "gpu-1"),
            ],
        ),
    );
    let mut pinned = gpus(1).remove(0);
    pinned.name = "remote-0".into();
    pinned.node_name = Some("node-2".into());
    resources.set_pool(
        "per-device",
        Pool::new(vec![pinned]).node_selection(NodeSelection::PerDevice),
    );
    resources.set_pool(
        "everywhere",
        Pool::new(gpus(2)).node_selection(NodeSelection::AllNodes),
    );
    // Pools for other nodes need an identity with RBAC for slices.
    let errors = Arc::new(Mutex::new(Vec::new()));
    let (_server, _shutdown, _root) =
        publisher(&api, Identity::Admin, &resources, Some(errors.clone())).await;
    let published = slices_when(&api, "every pool", |s| s.len() == 4).await;
    let by_pool = |pool: &str| -> Vec<&Value> {
        published
            .iter()
            .filter(|s| s["spec"]["pool"]["name"] == pool)
            .collect()
    };
    let local = by_pool(NODE);
    assert_eq!(
        local.len(),
        2,
        "counters and devices in slices of their own"
    );
    assert_eq!(
        local[0]["spec"]["sharedCounters"].as_array().unwrap().len(),
        2
    );
    assert_eq!(local[1]["spec"]["devices"].as_array().unwrap().len(), 3);
    assert!(local.iter().all(|s| s["spec"]["nodeName"] == NODE));
    let per_device = by_pool("per-device");
    assert_eq!(per_device[0]["spec"]["perDeviceNodeSelection"], true);
    assert_eq!(per_device[0]["spec"]["nodeName"], Value::Null);
    assert_eq!(per_device[0]["spec"]["devices"][0]["nodeName"], "node-2");
    let everywhere = by_pool("everywhere");
    assert_eq!(everywhere[0]["spec"]["allNodes"], true);
    assert_eq!(everywhere[0]["spec"]["nodeName"], Value::Null);
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );

    // A pool removed: its slices go, those of other nodes too.
    resources.remove_pool("everywhere");
    slices_when(&api, "the pool for every node gone", |s| s.len() == 3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_failures_reach_the_drivers_handler_and_the_counts() {
    let api = api_with_node().await;
    let resources = Resources::new();
    let mut twice = gpus(2);
    twice[1].name = "gpu-0".into();
    resources.set_pool("twice", Pool::new(twice));
    let mut refused = gpus(1);
    refused[0].name = "Not_A_DNS_Label".into();
    resources.set_pool("refused", Pool::new(refused));
    resources.set_pool(NODE, Pool::new(gpus(2)));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let driver_errors = Arc::new(Mutex::new(Vec::new()));
    let root = tempfile::tempdir().unwrap();
    let (publish_errors, all_errors) = (errors.clone(), driver_errors.clone());
    let _server = DraDriverServer::builder(DRIVER, Arc::new(NoCalls))
        .root_dir(root.path())
        .register(false)
        .resources(resources.clone())
        .kube(api.client(Identity::Node).await, NODE)
        .on_publish_error(move |e: &PublishError| {
            publish_errors.lock().unwrap().push(e.to_string())
        })
        .on_error(move |e| {
            all_errors
                .lock()
                .unwrap()
                .push((e.is_recoverable(), e.to_string()))
        })
        .start(CancellationToken::new())
        .await
        .unwrap();

    // The good pool is published all the same.
    slices_when(&api, "the good pool", |s| device_count(s) == 2).await;
    // The API refuses one pool; it is retried, each failure reported.
    eventually("two failures of the refused pool", TIMEOUT, || async {
        let errors = errors.lock().unwrap();
        (errors
            .iter()
            .filter(|e| e.contains(r#"pool "refused": create ResourceSlice"#))
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    let errors = errors.lock().unwrap().clone();
    // The pool the API would refuse is reported once and never sent.
    let invalid: Vec<&String> = errors
        .iter()
        .filter(|e| e.contains(r#"pool "twice" is not published"#))
        .collect();
    assert_eq!(invalid.len(), 1, "{errors:?}");
    assert!(invalid[0].contains(r#"device "gpu-0" appears twice"#));
    let stats = resources.stats();
    assert!(stats.failures >= 3, "{stats:?}");
    assert!(stats.last_error.is_some());
    assert_eq!(stats.creates, 1, "{stats:?}");
    // The driver's handler of every error got each, as recoverable.
    let driver_errors = driver_errors.lock().unwrap().clone();
    assert!(driver_errors.len() >= errors.len(), "{driver_errors:?}");
    assert!(driver_errors.iter().all(|(recoverable, _)| *recoverable));
    assert!(
        driver_errors
            .iter()
            .any(|(_, e)| e.contains(r#"pool "twice" is not published"#))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_does_not_wait_for_an_api_server_that_stopped_answering() {
    let api = api_with_node().await;
    let resources = Resources::new();
    resources.set_pool(NODE, Pool::new(gpus(1)));
    let root = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let server = DraDriverServer::builder(DRIVER, Arc::new(NoCalls))
        .root_dir(root.path())
        .resources(resources.clone())
        .kube(api.client(Identity::Node).await, NODE)
        .start(shutdown.clone())
        .await
        .unwrap();
    slices_when(&api, "published", |s| device_count(s) == 1).await;
    let registration = server.registration_socket().unwrap().to_owned();

    // The API server hangs while a change is being written.
    api.pause_apiserver().await;
    resources.set_pool(NODE, Pool::new(gpus(2)));
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, server.wait())
        .await
        .expect("shutdown waited for the API server")
        .unwrap();
    assert!(!registration.exists(), "deregistered");
    api.resume_apiserver().await;
}

/// The names and UIDs of the slices of pool `pool`.
fn pool_slices(slices: &[Value], pool: &str) -> Vec<(String, Value)> {
    slices
        .iter()
        .filter(|s| s["spec"]["pool"]["name"] == pool)
        .map(|s| {
            (
                s["metadata"]["uid"].as_str().unwrap().to_string(),
                s["spec"]["nodeName"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_driver_knows_its_pools_for_other_nodes_and_moves_pools_by_delete_and_create() {
    let api = api_with_node().await;
    let everywhere = || Pool::new(gpus(2)).node_selection(NodeSelection::AllNodes);
    let first = Resources::new();
    first.set_pool("everywhere", everywhere());
    first.set_pool("dropped", everywhere());
    first.set_pool("moving", Pool::new(gpus(1)));
    let (server, shutdown, _root) = publisher(&api, Identity::Admin, &first, None).await;
    let before = slices_when(&api, "three pools", |s| s.len() == 3).await;
    shutdown.cancel();
    server.wait().await.unwrap();

    // Started again: the pool for every node is the one it published (not
    // a second set), the dropped one goes, and the pool that moved from
    // this node to every node is deleted and created (nodeName cannot be
    // updated).
    let errors = Arc::new(Mutex::new(Vec::new()));
    let second = Resources::new();
    second.set_pool("everywhere", everywhere());
    second.set_pool(
        "moving",
        Pool::new(gpus(1)).node_selection(NodeSelection::AllNodes),
    );
    let (_server, _shutdown, _root) =
        publisher(&api, Identity::Admin, &second, Some(errors.clone())).await;
    let after = slices_when(&api, "the pools as the restarted driver has them", |s| {
        s.len() == 2 && pool_slices(s, "moving").iter().all(|(_, n)| n.is_null())
    })
    .await;
    eventually("the publisher done", TIMEOUT, || async {
        let stats = second.stats();
        (stats.creates == 1 && stats.deletes == 2).then_some(())
    })
    .await;
    assert_eq!(
        pool_slices(&after, "everywhere"),
        pool_slices(&before, "everywhere"),
        "the same slice, kept"
    );
    assert_eq!(slices(&api).await.len(), 2, "nothing published twice");

    // And back to this node, while running.
    second.set_pool("moving", Pool::new(gpus(1)));
    slices_when(&api, "the pool on this node again", |s| {
        let moving = pool_slices(s, "moving");
        moving.len() == 1 && moving[0].1 == NODE
    })
    .await;
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
}

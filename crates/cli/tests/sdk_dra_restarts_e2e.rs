//! An SDK driver's pool for every node across restarts, against a real
//! kube-apiserver with the real scheduler: ten restarts leave exactly one
//! set of slices (the same ones, neither written again nor doubled), and
//! the scheduler gives each device to one claim only.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::Device;
use nodeplugins_sdk::dra_driver::{DraDriverServer, NodeSelection, Pool, Resources};
use nodeplugins_test_support::control_plane::ControlPlane;
use nodeplugins_test_support::echo_dra_driver::NoCalls;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-1";
const DRIVER: &str = "dra.example.com";
const CLASS: &str = "gpu.example.com";
const GPUS: usize = 4;

/// The UIDs of the driver's slices.
async fn slice_uids(api: &KubeApi) -> BTreeSet<String> {
    let list = api
        .admin("GET", "/apis/resource.k8s.io/v1/resourceslices", None)
        .await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["spec"]["driver"] == DRIVER)
        .map(|s| s["metadata"]["uid"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_for_every_node_survives_ten_restarts_as_one_set_and_each_device_goes_to_one_claim()
{
    let (api, _control) = ControlPlane::with_node(NODE, CLASS, DRIVER).await;
    let gpus: Vec<Device> = (0..GPUS)
        .map(|i| Device {
            name: format!("gpu-{i}"),
            ..Default::default()
        })
        .collect();
    let mut published: Option<BTreeSet<String>> = None;
    for start in 0..11 {
        let resources = Resources::new();
        resources.set_pool(
            "shared",
            Pool::new(gpus.clone()).node_selection(NodeSelection::AllNodes),
        );
        let root = tempfile::tempdir().unwrap();
        let shutdown = CancellationToken::new();
        let server = DraDriverServer::builder(DRIVER, Arc::new(NoCalls))
            .root_dir(root.path())
            .register(false)
            .resources(resources.clone())
            .kube(api.client(Identity::Admin).await, NODE)
            .start(shutdown.clone())
            .await
            .unwrap();
        eventually("the publisher's first look done", TIMEOUT, || async {
            (resources.stats().syncs >= 1).then_some(())
        })
        .await;
        let stats = resources.stats();
        let uids = slice_uids(&api).await;
        match &published {
            None => {
                assert_eq!(stats.creates, 1, "{stats:?}");
                assert_eq!(uids.len(), 1);
                published = Some(uids);
            }
            Some(first) => {
                assert_eq!(
                    (stats.creates, stats.updates, stats.deletes),
                    (0, 0, 0),
                    "start {start}: {stats:?}"
                );
                assert_eq!(&uids, first, "start {start}: the same one set of slices");
            }
        }
        shutdown.cancel();
        server.wait().await.unwrap();
    }

    // One claim of one GPU per pod, one pod more than there are GPUs.
    let claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
    for i in 0..=GPUS {
        api.create_pod_with_claim(&i.to_string(), CLASS, 1).await;
        if i < GPUS {
            assert_eq!(
                api.wait_pod_bound("default", &format!("pod-{i}")).await,
                NODE
            );
        }
    }
    let mut allocated = BTreeSet::new();
    for i in 0..GPUS {
        let claim: Value = api.admin("GET", &format!("{claims}/claim-{i}"), None).await;
        let results = claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .unwrap();
        for result in results {
            let device = result["device"].as_str().unwrap().to_string();
            assert!(allocated.insert(device.clone()), "{device} given twice");
        }
    }
    assert_eq!(allocated.len(), GPUS);
    let why = api
        .wait_pod_unschedulable("default", &format!("pod-{GPUS}"))
        .await;
    assert!(!why.is_empty());
}

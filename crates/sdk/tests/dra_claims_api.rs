//! Claims the SDK reads from a real API server (feature `kube`), over real
//! sockets: they are read before the call is serialized, so a black-holed
//! API server holds up no other call; a device of a subrequest reaches the
//! kubelet under its base request; and a cluster that serves
//! `resource.k8s.io` only as v1beta2 gets its claims read and its slices
//! published in that version.
#![cfg(feature = "kube")]
// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::Device;
use nodeplugins_api::dra::v1;
use nodeplugins_api::dra::v1::dra_plugin_client::DraPluginClient;
use nodeplugins_api::transport::dial;
use nodeplugins_sdk::dra_driver::{
    Claim, DraDriver, DraDriverServer, Pool, PrepareResults, PreparedClaim, Resources,
    UnprepareResults,
};
use nodeplugins_sdk::k8s_openapi;
use nodeplugins_test_support::echo_dra_driver::AllocationEcho;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const DRIVER: &str = "gpu.example.com";
const NODE: &str = "node-1";

async fn client(server: &DraDriverServer) -> DraPluginClient<tonic::transport::Channel> {
    DraPluginClient::new(dial(server.service_socket(), TIMEOUT).await.unwrap())
}

fn claim(name: &str) -> v1::Claim {
    v1::Claim {
        namespace: "ns".into(),
        uid: format!("uid-{name}"),
        name: name.into(),
    }
}

/// Claim `default/NAME` in API version `version` asking for `requests`,
/// allocated `results`: its UID.
async fn allocated_claim(
    api: &KubeApi,
    version: &str,
    name: &str,
    requests: Value,
    results: Value,
) -> String {
    let claims = format!("/apis/resource.k8s.io/{version}/namespaces/default/resourceclaims");
    let claim = json!({
        "apiVersion": format!("resource.k8s.io/{version}"),
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": requests}},
    });
    let created = api.admin("POST", &claims, Some(&claim)).await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let allocation = json!({"status": {"allocation": {"devices": {"results": results}}}});
    api.admin(
        "PATCH",
        &format!("{claims}/{name}/status"),
        Some(&allocation),
    )
    .await;
    uid
}

/// The driver `driver` serving with the API server as the admin, its
/// devices in `resources`.
async fn serve(
    api: &KubeApi,
    root: &std::path::Path,
    driver: Arc<dyn DraDriver>,
    resources: Option<Resources>,
) -> (DraDriverServer, CancellationToken) {
    let shutdown = CancellationToken::new();
    let mut builder = DraDriverServer::builder(DRIVER, driver)
        .root_dir(root)
        .register(false)
        .kube(api.client(Identity::Admin).await, NODE);
    if let Some(resources) = resources {
        builder = builder.resources(resources);
    }
    (builder.start(shutdown.clone()).await.unwrap(), shutdown)
}

/// Prepares claim `default/NAME` of UID `uid`: its result.
async fn prepare_claim(
    server: &DraDriverServer,
    name: &str,
    uid: &str,
) -> v1::NodePrepareResourceResponse {
    let request = v1::NodePrepareResourcesRequest {
        claims: vec![v1::Claim {
            namespace: "default".into(),
            uid: uid.into(),
            name: name.into(),
        }],
    };
    let answer = tokio::time::timeout(
        TIMEOUT,
        client(server).await.node_prepare_resources(request),
    )
    .await
    .unwrap()
    .unwrap()
    .into_inner();
    answer.claims[uid].clone()
}

/// Answers nothing: for tests that make no call.
struct NoCalls;

#[nodeplugins_sdk::async_trait]
impl DraDriver for NoCalls {
    async fn prepare(&self, _: Vec<Claim>) -> PrepareResults {
        HashMap::new()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        claims.into_iter().map(|c| (c.claim.uid, Ok(()))).collect()
    }
}

/// A server that accepts connections, reads what it is sent and never
/// answers: an API server that has stopped responding. The receiver
/// counts the requests' first bytes received.
async fn black_hole() -> (String, watch::Receiver<usize>, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (heard, requests) = watch::channel(0);
    let task = tokio::spawn(async move {
        while let Ok((mut connection, _)) = listener.accept().await {
            let heard = heard.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let mut counted = false;
                while let Ok(n) = connection.read(&mut buffer).await {
                    if n == 0 {
                        break;
                    }
                    if !counted {
                        counted = true;
                        heard.send_modify(|n| *n += 1);
                    }
                }
                // Held open, unanswered, until the peer closes it.
            });
        }
    });
    (url, requests, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_read_from_a_silent_api_server_holds_up_no_other_call() {
    let root = tempfile::tempdir().unwrap();
    let (url, mut heard, _hole) = black_hole().await;
    let config = kube::Config::new(url.parse().unwrap());
    let kube = kube::Client::try_from(config).unwrap();
    let driver = Arc::new(NoCalls);
    let server = DraDriverServer::builder(DRIVER, driver)
        .root_dir(root.path())
        .register(false)
        .kube(kube, "node-1")
        .start(CancellationToken::new())
        .await
        .unwrap();
    let client = client(&server).await;

    // This prepare waits for the API server, which never answers...
    let mut waiting = client.clone();
    let stuck = tokio::spawn(async move {
        waiting
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: vec![claim("c1")],
            })
            .await
    });
    tokio::time::timeout(TIMEOUT, heard.wait_for(|n| *n >= 1))
        .await
        .expect("the prepare's claim read reached the API server")
        .unwrap();
    // ...while an unprepare, serialized with it, goes through.
    let request = v1::NodeUnprepareResourcesRequest {
        claims: vec![claim("c2")],
    };
    let results = tokio::time::timeout(TIMEOUT, client.clone().node_unprepare_resources(request))
        .await
        .unwrap()
        .unwrap()
        .into_inner()
        .claims;
    assert_eq!(results["uid-c2"].error, "");
    assert!(
        !stuck.is_finished(),
        "the unprepare did not wait for the prepare's API read"
    );
    stuck.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_of_a_subrequest_reaches_the_kubelet_under_its_base_request() {
    let api = KubeApi::start(NODE).await;
    let requests = json!([{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.example.com"},
        {"name": "small", "deviceClassName": "gpu.example.com"},
    ]}]);
    let results =
        json!([{"request": "gpu/big", "driver": DRIVER, "pool": "pool", "device": "gpu-0"}]);
    let uid = allocated_claim(&api, "v1", "gpu", requests, results).await;
    let root = tempfile::tempdir().unwrap();
    let (server, shutdown) =
        serve(&api, root.path(), Arc::new(AllocationEcho::default()), None).await;
    let result = prepare_claim(&server, "gpu", &uid).await;
    assert_eq!(result.error, "");
    assert_eq!(result.devices[0].device_name, "gpu-0");
    assert_eq!(
        result.devices[0].request_names,
        ["gpu"],
        "the kubelet gives a container asking for `gpu` the devices named so"
    );
    shutdown.cancel();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_without_resource_v1_gets_claims_read_and_slices_published_in_v1beta2() {
    let api = KubeApi::start_with(
        NODE,
        &["--runtime-config=resource.k8s.io/v1=false,resource.k8s.io/v1beta2=true"],
    )
    .await;
    let served = api
        .request(
            Identity::Admin,
            "GET",
            "/apis/resource.k8s.io/v1/resourceslices",
            None,
        )
        .await;
    assert_eq!(served.status, 404, "v1 is off: {}", served.body);
    api.admin(
        "POST",
        "/api/v1/nodes",
        Some(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})),
    )
    .await;
    let requests = json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]);
    let results = json!([{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-1"}]);
    let uid = allocated_claim(&api, "v1beta2", "gpu", requests, results).await;

    let resources = Resources::new();
    let devices = (0..2)
        .map(|i| Device {
            name: format!("gpu-{i}"),
            ..Default::default()
        })
        .collect();
    resources.set_pool(NODE, Pool::new(devices));
    let root = tempfile::tempdir().unwrap();
    let (server, shutdown) = serve(
        &api,
        root.path(),
        Arc::new(AllocationEcho::default()),
        Some(resources.clone()),
    )
    .await;
    let result = prepare_claim(&server, "gpu", &uid).await;
    assert_eq!(result.error, "");
    assert_eq!(result.devices[0].device_name, "gpu-1");
    let slices = eventually("the pool published in v1beta2", TIMEOUT, || async {
        let list = api
            .admin("GET", "/apis/resource.k8s.io/v1beta2/resourceslices", None)
            .await;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        (!items.is_empty()).then_some(items)
    })
    .await;
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0]["spec"]["nodeName"], NODE);
    assert_eq!(slices[0]["spec"]["devices"].as_array().unwrap().len(), 2);
    assert_eq!(resources.stats().failures, 0, "{:?}", resources.stats());
    shutdown.cancel();
    server.wait().await.unwrap();
}

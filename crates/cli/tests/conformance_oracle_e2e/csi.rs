//! A CSI driver behind the kubelet's plugin manager and its CSI volume
//! plugin's registration handler, which asks the driver for NodeGetInfo
//! and writes the node id into the node's CSINode.

use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::Value;

use super::common::kube::{csi_driver, csi_registrar, csi_socket};
use super::{NODE, cluster, kubelet, root};

const DRIVER: &str = "csi.example.com";

/// The SDK's example CSI driver with `node_id`, and the CSI registrar, for
/// the kubelet at `root`; the kubelet's registration event for it.
async fn registered_with_node_id(api: &KubeApi, node_id: &str) -> Value {
    let root = root();
    let mut kubelet = kubelet(api, root.path()).await;
    let socket = csi_socket(root.path(), DRIVER);
    let _driver = csi_driver(&socket, DRIVER, node_id, "zone-a");
    let _registrar = csi_registrar(root.path(), &socket);
    kubelet
        .event(TIMEOUT, "registered", |e| e["type"] == "CSIPlugin")
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn no_node_id_fails_the_kubelet_refuses_the_csi_driver() {
    let api = cluster().await;
    let registered = registered_with_node_id(&api, "").await;
    assert_eq!(registered["name"], DRIVER, "{registered}");
    // The node info manager refuses a driver without a node id.
    let error = registered["error"].as_str().unwrap();
    assert!(
        error.contains("driverNodeID must not be empty"),
        "{registered}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_id_passes_the_kubelet_records_the_driver_in_the_csinode() {
    let api = cluster().await;
    let registered = registered_with_node_id(&api, "node-7").await;
    assert_eq!(registered["error"], "", "{registered}");
    let csinode = api
        .admin(
            "GET",
            &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}"),
            None,
        )
        .await;
    let drivers = csinode["spec"]["drivers"].as_array().unwrap();
    assert!(
        drivers
            .iter()
            .any(|d| d["name"] == DRIVER && d["nodeID"] == "node-7"),
        "{csinode}"
    );
}

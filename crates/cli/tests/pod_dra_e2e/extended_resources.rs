//! An extended resource a DeviceClass backs, reaching the container that asks.

use serde_json::json;

use super::common::cluster_drivers::Driver;
use super::{CLAIMS, Cluster, DRIVER, NODE, PODS, admin, agent_containers, delete_pod, sorted};

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

//! A claim made from a template (`firstAvailable`, an opaque configuration,
//! a request per container) with each example driver, through an agent restart.

use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::{Value, json};

use super::common::cluster_drivers::{Driver, prepared_devices};
use super::common::{agent_with, dra_driver_when, signal};
use super::{
    CLAIMS, CLASS, Cluster, DRIVER, NODE, PODS, admin, agent_containers, cli_json, delete_pod, pod,
    sorted,
};

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
            "--pods",
            "off",
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

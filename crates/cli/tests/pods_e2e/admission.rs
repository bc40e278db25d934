//! Pods admitted with nothing but the API: devices container by container
//! (an init container's devices given again to the containers after it),
//! claims from templates and shared claims prepared, what each container
//! gets served on the pod-resources socket, and everything given back when
//! the pods go.

use super::common::cli;
use super::common::pods::*;
use super::*;
use serde_json::json;

fn sidecar(name: &str, devices: usize) -> Value {
    let mut sidecar = container(name, devices, &[]);
    sidecar["restartPolicy"] = json!("Always");
    sidecar
}

/// `nodeplugins pod-resources -o json`: (namespace/name, containers).
async fn pod_resources(node: &Node) -> Vec<(String, Vec<String>)> {
    let out = cli(node.root(), &["pod-resources", "-o", "json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["pod_resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = format!(
                "{}/{}",
                p["namespace"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            );
            let containers = p["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect();
            (name, containers)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_get_devices_and_claims_from_the_api_alone_and_give_everything_back_when_they_go() {
    let cluster = Cluster::start(&[NODE]).await;
    let node = Node::start(&cluster, NODE, 4, 4).await;
    cluster.claim_template("gpu").await;
    cluster.claim("shared").await;

    // An init container with two devices, then a sidecar with one and the
    // app container with two: the init container has ended when they start,
    // so its devices go to them first (three devices for the pod, as the
    // scheduler counts it).
    let train = with_claims(
        with_init(
            pod("train", NODE, vec![container("main", 2, &["gpu"])]),
            vec![container("setup", 2, &[]), sidecar("proxy", 1)],
        ),
        vec![from_template("gpu", "gpu")],
    );
    cluster.create(&train).await;
    for name in ["serve-a", "serve-b"] {
        let serve = with_claims(
            pod(name, NODE, vec![container("main", 0, &["shared"])]),
            vec![named_claim("shared", "shared")],
        );
        cluster.create(&serve).await;
    }

    let train = node.pod_when("train", "admitted", admitted).await;
    let setup = devices_of(&train, "setup");
    let proxy = devices_of(&train, "proxy");
    let main = devices_of(&train, "main");
    assert_eq!((setup.len(), proxy.len(), main.len()), (2, 1, 2), "{train}");
    assert!(
        proxy.is_subset(&setup),
        "the sidecar gets an ended init container's device: {train}"
    );
    assert_eq!(
        main.intersection(&setup).count(),
        1,
        "the app container gets the init container's other device, and one more: {train}"
    );
    assert!(
        main.is_disjoint(&proxy),
        "the sidecar keeps its device: {train}"
    );
    assert_eq!(
        claim_cdi_of(&train, "main").len(),
        1,
        "the GPU of its claim: {train}"
    );
    let main_row = containers(&train)
        .into_iter()
        .find(|c| c["name"] == "main")
        .unwrap();
    assert!(
        main_row["envs"]["EXAMPLE_DEVICES"].is_string(),
        "{main_row}"
    );
    assert_eq!(
        main_row["device_specs"].as_array().unwrap().len(),
        2,
        "{main_row}"
    );
    assert_eq!(
        main_row["cdi_devices"].as_array().unwrap().len(),
        2,
        "{main_row}"
    );

    let a = node.pod_when("serve-a", "admitted", admitted).await;
    let b = node.pod_when("serve-b", "admitted", admitted).await;
    assert_eq!(claim_cdi_of(&a, "main").len(), 1, "{a}");
    assert_eq!(
        claim_cdi_of(&a, "main"),
        claim_cdi_of(&b, "main"),
        "one shared GPU"
    );
    assert_eq!(node.cdi_specs(), 2, "one CDI spec per prepared claim");

    // The pod-resources API lists exactly the admitted pods, each with the
    // containers the kubelet lists: sidecars and app containers.
    let served = pod_resources(&node).await;
    assert_eq!(
        served,
        [
            ("default/serve-a".to_string(), vec!["main".to_string()]),
            ("default/serve-b".to_string(), vec!["main".to_string()]),
            (
                "default/train".to_string(),
                vec!["proxy".to_string(), "main".to_string()]
            ),
        ]
    );

    // One user of the shared claim goes: the claim stays prepared.
    cluster.delete("serve-a").await;
    node.pods_when("serve-a gone", |pods| {
        !pods.iter().any(|p| p["name"] == "serve-a")
    })
    .await;
    assert_eq!(
        node.cdi_specs(),
        2,
        "the other pod still uses the shared claim"
    );

    for name in ["train", "serve-b"] {
        cluster.delete(name).await;
    }
    node.pods_when("every pod gone", |pods| pods.is_empty())
        .await;
    assert_eq!(node.held().await, (0, 0), "nothing allocated or prepared");
    assert_eq!(node.cdi_specs(), 0, "every CDI spec removed");
    assert!(pod_resources(&node).await.is_empty());

    // Every device is free again: a pod asking for all four is placed and
    // admitted.
    cluster
        .create(&pod("all", NODE, vec![container("main", 4, &[])]))
        .await;
    let all = node.pod_when("all", "admitted", admitted).await;
    assert_eq!(devices_of(&all, "main").len(), 4, "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_whose_devices_cannot_be_allocated_gets_the_kubelets_event_and_is_tried_again() {
    let cluster = Cluster::start(&[NODE]).await;
    let node = Node::start(&cluster, NODE, 2, 1).await;
    // Bound by hand past the scheduler: more devices than the node has.
    let mut greedy = pod("greedy", NODE, vec![container("main", 3, &[])]);
    greedy["spec"]["nodeName"] = json!(NODE);
    greedy["spec"].as_object_mut().unwrap().remove("affinity");
    cluster.create(&greedy).await;
    let failed = node
        .pod_when("greedy", "failed", |p| p["phase"] == "failed")
        .await;
    assert_eq!(failed["reason"], "UnexpectedAdmissionError", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert_eq!(
        message,
        "Allocate failed due to requested number of devices unavailable for example.com/device. Requested: 3, Available: 2, which is unexpected"
    );
    let events = nodeplugins_test_support::wait::eventually(
        "the Warning Event on the pod",
        nodeplugins_test_support::wait::TIMEOUT,
        || async {
            let events = cluster.events_of("greedy").await;
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    assert_eq!(events[0]["reason"], "UnexpectedAdmissionError");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["message"], message);
    assert_eq!(events[0]["involvedObject"]["kind"], "Pod");
    assert_eq!(events[0]["source"]["host"], NODE);
    // Tried again with backoff: the failures count up, and the Event is
    // not recorded again for the same failure.
    node.pod_when("greedy", "tried again", |p| {
        p["failures"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(
        cluster.events_of("greedy").await.len(),
        1,
        "one Event per failure"
    );
    assert_eq!(
        node.held().await,
        (0, 0),
        "nothing kept of a pod not admitted"
    );
}

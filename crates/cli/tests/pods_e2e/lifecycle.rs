//! What a pod holds is given back whatever way it goes: deleted while the
//! agent was stopped, made again under the same name (a StatefulSet's pod),
//! ended (`Succeeded`), or after its claims failed to prepare; and a pod of
//! another node is never prepared here.

use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::json;

use super::common::cli;
use super::common::pods::*;
use super::*;

/// A pod with one device and a GPU from template `gpu`.
fn gpu_pod(name: &str) -> Value {
    with_claims(
        pod(name, NODE, vec![container("main", 1, &["gpu"])]),
        vec![from_template("gpu", "gpu")],
    )
}

/// The UIDs of the pods the records of prepared claims name.
async fn recorded_pods(node: &Node) -> BTreeSet<String> {
    let out = cli(node.root(), &["dra", "claims", "-o", "json"]).await;
    let claims: Value = serde_json::from_slice(&out.stdout).unwrap();
    claims["claims"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["pods"].as_array().cloned().unwrap_or_default())
        .map(|p| p["uid"].as_str().unwrap().to_string())
        .collect()
}

async fn uid_of(cluster: &Cluster, name: &str) -> String {
    cluster.pod(name).await["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_gone_while_the_agent_was_stopped_or_made_again_under_their_name_are_given_back_at_its_start()
 {
    let cluster = Cluster::start(&[NODE]).await;
    let mut node = Node::start(&cluster, NODE, 4, 4).await;
    cluster.claim_template("gpu").await;
    cluster.claim("shared").await;
    cluster.create(&gpu_pod("gone")).await;
    cluster.create(&gpu_pod("again")).await;
    let shared = |name: &str| {
        with_claims(
            pod(name, NODE, vec![container("main", 0, &["shared"])]),
            vec![named_claim("shared", "shared")],
        )
    };
    cluster.create(&shared("shared-user")).await;
    for name in ["gone", "again", "shared-user"] {
        node.pod_when(name, "admitted", admitted).await;
    }
    let old_again = uid_of(&cluster, "again").await;
    let old_shared = uid_of(&cluster, "shared-user").await;
    assert_eq!(node.cdi_specs(), 3);

    // While the agent is stopped: one pod deleted, two made again under
    // their names (new UIDs; `again` gets a new claim from its template).
    node.stop_agent().await;
    cluster.delete("gone").await;
    cluster.delete("again").await;
    cluster.delete("shared-user").await;
    eventually("the old claims deleted", TIMEOUT, || async {
        (cluster.claims().await.len() == 1).then_some(())
    })
    .await;
    cluster.create(&gpu_pod("again")).await;
    cluster.create(&shared("shared-user")).await;
    let new_again = uid_of(&cluster, "again").await;
    let new_shared = uid_of(&cluster, "shared-user").await;
    assert_ne!(new_again, old_again);
    node.start_agent().await;

    let again = node
        .pod_when("again", "admitted again", |p| {
            admitted(p) && p["uid"] == new_again.as_str()
        })
        .await;
    assert_eq!(claim_cdi_of(&again, "main").len(), 1, "{again}");
    node.pod_when("shared-user", "admitted again", |p| {
        admitted(p) && p["uid"] == new_shared.as_str()
    })
    .await;
    eventually("only the live pods recorded", TIMEOUT, || async {
        let recorded = recorded_pods(&node).await;
        let live: BTreeSet<String> = [new_again.clone(), new_shared.clone()].into();
        (recorded == live).then_some(())
    })
    .await;
    eventually("the old pods' claims unprepared", TIMEOUT, || async {
        (node.cdi_specs() == 2).then_some(())
    })
    .await;
    let (devices, _) = node.held().await;
    assert_eq!(devices, 1, "only the new `again` holds a device");
    let pods = node.pods().await;
    assert!(
        !pods["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["uid"] == old_again.as_str() || p["uid"] == old_shared.as_str()),
        "the old pods are forgotten once given back: {pods}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_ends_or_whose_claim_fails_gives_back_what_it_holds() {
    let cluster = Cluster::start(&[NODE]).await;
    let node = Node::start(&cluster, NODE, 2, 2).await;
    cluster.claim_template("gpu").await;

    // Succeeded: given back while the API still has the pod.
    cluster.create(&gpu_pod("job")).await;
    node.pod_when("job", "admitted", admitted).await;
    let status = json!({"status": {"phase": "Succeeded"}});
    cluster
        .api
        .admin("PATCH", &format!("{PODS}/job/status"), Some(&status))
        .await;
    node.pod_when("job", "given back", |p| p["phase"] == "released")
        .await;
    assert_eq!(node.held().await, (0, 0));
    assert_eq!(node.cdi_specs(), 0);

    // The example driver fails claims named fail*: a template claim of a
    // pod named fail-... is one. The claim is recorded before the driver
    // is called, so the driver is asked to unprepare it when the pod goes.
    cluster.create(&gpu_pod("fail-once")).await;
    let failed = node
        .pod_when("fail-once", "failed", |p| p["phase"] == "failed")
        .await;
    assert_eq!(
        failed["reason"], "FailedPrepareDynamicResources",
        "{failed}"
    );
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .starts_with("Failed to prepare dynamic resources: "),
        "{failed}"
    );
    let uid = uid_of(&cluster, "fail-once").await;
    assert_eq!(
        recorded_pods(&node).await,
        [uid].into(),
        "recorded before the call"
    );
    let events = eventually("the Warning Event", TIMEOUT, || async {
        let events = cluster.events_of("fail-once").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events[0]["reason"], "FailedPrepareDynamicResources");
    cluster.delete("fail-once").await;
    node.pods_when("fail-once forgotten", |pods| {
        !pods.iter().any(|p| p["name"] == "fail-once")
    })
    .await;
    assert_eq!(node.held().await, (0, 0), "the failed claim was unprepared");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_bound_to_another_node_is_never_prepared_here() {
    let cluster = Cluster::start(&[NODE, "node-2"]).await;
    let node = Node::start(&cluster, NODE, 2, 2).await;
    cluster.claim_template("gpu").await;
    // A pod placed on node-2 by hand, with a claim allocated to one of
    // node-1's GPUs and reserved for it, as a confused controller might.
    cluster.claim("elsewhere").await;
    let mut elsewhere = with_claims(
        pod("elsewhere", NODE, vec![container("main", 0, &["gpu"])]),
        vec![named_claim("gpu", "elsewhere")],
    );
    elsewhere["spec"]["nodeName"] = json!("node-2");
    elsewhere["spec"]
        .as_object_mut()
        .unwrap()
        .remove("affinity");
    cluster.create(&elsewhere).await;
    let uid = uid_of(&cluster, "elsewhere").await;
    let allocation = json!({"status": {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "elsewhere", "uid": uid}],
    }});
    cluster
        .api
        .admin(
            "PATCH",
            &format!("{CLAIMS}/elsewhere/status"),
            Some(&allocation),
        )
        .await;
    // Our agent serves node-1's pods: a pod of its own comes and is
    // admitted, the other node's never shows.
    cluster.create(&gpu_pod("mine")).await;
    node.pod_when("mine", "admitted", admitted).await;
    let pods = node.pods().await;
    assert_eq!(pods["pods"].as_array().unwrap().len(), 1, "{pods}");
    assert_eq!(recorded_pods(&node).await.len(), 1);

    let driver_log = std::fs::read_to_string(node.root().join("driver.log")).unwrap();
    assert!(
        !driver_log.contains("elsewhere"),
        "the driver never heard of the other node's claim"
    );
}

//! Claims an admin makes by hand: refused, naming the claim, when the pod may
//! not use them; prepared once for two pods that share one.

use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

use super::common::cluster_drivers::{Driver, prepared_devices};
use super::{CLAIMS, CLASS, Cluster, DRIVER, NODE, PODS, admin, agent_containers, delete_pod, pod};

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

    // Bound to another node: its claim is allocated one of this node's
    // GPUs and reserved for it, yet this node must not prepare it (the
    // device could end up used twice).
    plain_claim(api, "elsewhere").await;
    let mut stray = pod(
        "stray",
        json!([{"name": "gpu", "resourceClaimName": "elsewhere"}]),
        &[("main", json!([{"name": "gpu"}]))],
    );
    stray["spec"]["nodeName"] = "node-2".into();
    let created = admin(api, "POST", PODS, Some(&stray)).await;
    let stray_uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    allocate(api, "elsewhere", &[("stray", &stray_uid)]).await;
    let error = cluster.agent_prepare("stray").await.unwrap_err();
    // The node's own identity may not even read another node's pod (the
    // Node authorizer); broader credentials (a ServiceAccount) may, and
    // then the agent refuses it itself.
    assert!(
        error.contains("pod default/stray is bound to node node-2, not node-1")
            || error.contains("read pod default/stray") && error.contains("forbidden"),
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

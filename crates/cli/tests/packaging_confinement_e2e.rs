//! The packaged manifests confine each agent and each example DRA driver
//! to its own node, against a real kube-apiserver: a token bound to the
//! pod on node-1 (as the kubelet gives it) writes node-1's objects and is
//! refused node-2's, and a token of the same account bound to no pod on a
//! node writes nothing.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::kube::*;
use common::packaging::*;

use nodeplugins_test_support::kube_api::{KubeApi, Response};
use serde_json::{Value, json};

const NODE: &str = "node-1";
const OTHER: &str = "node-2";

async fn send(
    api: &KubeApi,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Response {
    api.request_as(token, method, path, body).await.unwrap()
}

/// Whether the policy refused the request, naming `why`.
fn refused(answer: &Response, why: &str) -> bool {
    answer.status == 403 && answer.body["message"].as_str().unwrap_or("").contains(why)
}

/// A label on `OTHER`, which the policy forbids.
async fn agent_policy_enforced(api: &KubeApi, token: &str) {
    let patch = json!({"metadata": {"labels": {"probe": "1"}}});
    let path = format!("/api/v1/nodes/{OTHER}");
    policy_enforced(api, token, "PATCH", &path, &patch).await;
}

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

/// Slice `name` of `node`, made by the admin.
async fn admin_slice(api: &KubeApi, name: &str, node: &str) {
    let slice = slice(name, node, "dra.example.com");
    api.admin("POST", SLICES, Some(&slice)).await;
}

async fn slice_exists(api: &KubeApi, name: &str) -> bool {
    let answer = api
        .request(
            nodeplugins_test_support::kube_api::Identity::Admin,
            "GET",
            &format!("{SLICES}/{name}"),
            None,
        )
        .await;
    answer.status == 200
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_token_writes_its_own_nodes_objects_and_is_refused_every_other_nodes() {
    let api = api_with_nodes(NODE, &[NODE, OTHER]).await;
    let objects = apply(&api, "nodeplugins.yaml").await;
    let (_, (namespace, account)) = daemon_set(&objects);
    let pod = daemon_pod(&api, &namespace, &account, NODE).await;
    let token = api
        .service_account_token(&namespace, &account, Some(&pod))
        .await;
    agent_policy_enforced(&api, &token).await;
    let why = format!("the nodeplugins agent on node {NODE} may not write");

    // node-2's status: refused; node-1's: written.
    let status = json!({"status": {"capacity": {"example.com/device": "9"}}});
    let other_status = format!("/api/v1/nodes/{OTHER}/status");
    let answer = send(&api, &token, "PATCH", &other_status, Some(&status)).await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    let own_status = format!("/api/v1/nodes/{NODE}/status");
    let answer = send(&api, &token, "PATCH", &own_status, Some(&status)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // node-2's labels, and cordoning it: refused. Its own node's labels are
    // written; its own node's spec is not (the agent never cordons).
    let label = json!({"metadata": {"labels": {"topology.example.com/zone": "z"}}});
    let cordon = json!({"spec": {"unschedulable": true}});
    for patch in [&label, &cordon] {
        let path = format!("/api/v1/nodes/{OTHER}");
        let answer = send(&api, &token, "PATCH", &path, Some(patch)).await;
        assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    }
    let own = format!("/api/v1/nodes/{NODE}");
    let answer = send(&api, &token, "PATCH", &own, Some(&label)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = send(&api, &token, "PATCH", &own, Some(&cordon)).await;
    assert!(
        refused(&answer, "never its spec"),
        "{} {}",
        answer.status,
        answer.body
    );
    let node = api.admin("GET", &other_status, None).await;
    assert!(node["status"]["capacity"]["example.com/device"].is_null());
    assert!(node["spec"]["unschedulable"].is_null());

    // node-2's CSINode: neither made nor deleted. node-1's is made.
    let csinode = |node: &str| {
        json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": node},
            "spec": {"drivers": []},
        })
    };
    let csinodes = "/apis/storage.k8s.io/v1/csinodes";
    let answer = send(&api, &token, "POST", csinodes, Some(&csinode(OTHER))).await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    api.admin("POST", csinodes, Some(&csinode(OTHER))).await;
    let other_csinode = format!("{csinodes}/{OTHER}");
    let answer = send(&api, &token, "DELETE", &other_csinode, None).await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    let answer = send(&api, &token, "POST", csinodes, Some(&csinode(NODE))).await;
    assert_eq!(answer.status, 201, "{}", answer.body);

    // node-2's Lease: not made. node-1's is, in kube-node-lease only.
    let lease = |node: &str, namespace: &str| {
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": namespace},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40},
        })
    };
    let leases =
        |namespace: &str| format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases");
    let answer = send(
        &api,
        &token,
        "POST",
        &leases("kube-node-lease"),
        Some(&lease(OTHER, "kube-node-lease")),
    )
    .await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    let answer = send(
        &api,
        &token,
        "POST",
        &leases("default"),
        Some(&lease(NODE, "default")),
    )
    .await;
    assert!(
        refused(&answer, "no other Lease"),
        "{} {}",
        answer.status,
        answer.body
    );
    let answer = send(
        &api,
        &token,
        "POST",
        &leases("kube-node-lease"),
        Some(&lease(NODE, "kube-node-lease")),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);

    // node-2's ResourceSlices: the agent's wipe of them is refused and they
    // stay; node-1's go.
    admin_slice(&api, "other", OTHER).await;
    admin_slice(&api, "own", NODE).await;
    let wipe = |node: &str| format!("{SLICES}?fieldSelector=spec.nodeName%3D{node}");
    let answer = send(&api, &token, "DELETE", &wipe(OTHER), None).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(slice_exists(&api, "other").await, "node-2's slice stays");
    let answer = send(&api, &token, "DELETE", &wipe(NODE), None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(!slice_exists(&api, "own").await, "node-1's slice is gone");

    // The same account's token bound to no pod names no node: it writes
    // nothing, not even node-1's status.
    let unbound = api.service_account_token(&namespace, &account, None).await;
    let answer = send(&api, &unbound, "PATCH", &own_status, Some(&status)).await;
    assert!(
        refused(&answer, "names no node"),
        "{} {}",
        answer.status,
        answer.body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_drivers_token_writes_its_own_nodes_slices_only() {
    let api = api_with_nodes(NODE, &[NODE, OTHER]).await;
    let objects = apply(&api, "example-dra-driver.yaml").await;
    let (_, (namespace, account)) = daemon_set(&objects);
    let pod = daemon_pod(&api, &namespace, &account, NODE).await;
    let token = api
        .service_account_token(&namespace, &account, Some(&pod))
        .await;
    let probe = slice("probe", OTHER, "dra.example.com");
    policy_enforced(&api, &token, "POST", SLICES, &probe).await;
    let why = format!("the driver on node {NODE} may not write");

    let answer = send(
        &api,
        &token,
        "POST",
        SLICES,
        Some(&slice("b", OTHER, "dra.example.com")),
    )
    .await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    // A slice for all nodes is not one node's either.
    let mut everywhere = slice("c", OTHER, "dra.example.com");
    everywhere["spec"]
        .as_object_mut()
        .unwrap()
        .remove("nodeName");
    everywhere["spec"]["allNodes"] = json!(true);
    let answer = send(&api, &token, "POST", SLICES, Some(&everywhere)).await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    let answer = send(
        &api,
        &token,
        "POST",
        SLICES,
        Some(&slice("a", NODE, "dra.example.com")),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);

    admin_slice(&api, "other", OTHER).await;
    let answer = send(&api, &token, "DELETE", &format!("{SLICES}/other"), None).await;
    assert!(refused(&answer, &why), "{} {}", answer.status, answer.body);
    assert!(slice_exists(&api, "other").await, "node-2's slice stays");
    let answer = send(&api, &token, "DELETE", &format!("{SLICES}/a"), None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

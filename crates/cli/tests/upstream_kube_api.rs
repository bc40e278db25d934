//! The real kube-apiserver on loopback (`KubeApi`): a node identity sets the
//! device capacity of its own Node's status and is refused on another Node,
//! as the Node authorizer and the NodeRestriction admission plugin decide.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use serde_json::{Value, json};

const RESOURCE: &str = "example.com/device";

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
}

fn capacity_patch(count: &str) -> Value {
    json!({"status": {"capacity": {RESOURCE: count}}})
}

#[tokio::test]
async fn node_sets_device_capacity_on_its_own_status_and_is_refused_on_another_node() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start("node-1").await;
    for name in ["node-1", "node-2"] {
        let created = api
            .request(Identity::Admin, "POST", "/api/v1/nodes", Some(&node(name)))
            .await;
        assert_eq!(created.status, 201, "create {name}: {}", created.body);
    }

    let own = api
        .request(
            Identity::Node,
            "PATCH",
            "/api/v1/nodes/node-1/status",
            Some(&capacity_patch("2")),
        )
        .await;
    assert_eq!(own.status, 200, "{}", own.body);

    let node_1 = api
        .request(Identity::Admin, "GET", "/api/v1/nodes/node-1", None)
        .await;
    assert_eq!(node_1.status, 200, "{}", node_1.body);
    assert_eq!(node_1.body["status"]["capacity"][RESOURCE], "2");
    // The server copies capacity into an empty allocatable.
    assert_eq!(node_1.body["status"]["allocatable"][RESOURCE], "2");

    let other = api
        .request(
            Identity::Node,
            "PATCH",
            "/api/v1/nodes/node-2/status",
            Some(&capacity_patch("2")),
        )
        .await;
    assert_eq!(other.status, 403, "{}", other.body);

    let node_2 = api
        .request(Identity::Admin, "GET", "/api/v1/nodes/node-2", None)
        .await;
    assert_eq!(node_2.status, 200, "{}", node_2.body);
    assert!(
        node_2.body["status"]["capacity"].get(RESOURCE).is_none(),
        "{}",
        node_2.body
    );
}

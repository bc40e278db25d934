//! The agent's retries against a real kube-apiserver where one request
//! alone would not do: credentials refused on a watch (the token changed
//! where no file event tells), and a CSINode that the node's own identity
//! may read but not watch, deleted by another writer.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::kube::*;
use common::*;

use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

const NODE: &str = "node-1";
const RESOURCE: &str = "example.com/device";
const NAMESPACE: &str = "agents";

/// ServiceAccount `NAMESPACE/name`, allowed everything (the packaged
/// policies confine only the packaged account).
async fn service_account(api: &KubeApi, name: &str) {
    api.admin(
        "POST",
        &format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts"),
        Some(&json!({"metadata": {"name": name}})),
    )
    .await;
    let binding = json!({
        "metadata": {"name": format!("{NAMESPACE}-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
    });
    api.admin(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        Some(&binding),
    )
    .await;
}

/// Writes `token` to `file` as a rotation does: a new file renamed over it.
fn replace_token(file: &Path, token: &str) {
    let new = file.with_extension("new");
    std::fs::write(&new, token).unwrap();
    std::fs::rename(&new, file).unwrap();
}

/// Who the agent on `root` says the API server takes it for.
async fn agent_user(root: &Path) -> Option<String> {
    let status = status_json(root).await?;
    Some(status["kube_api"]["user"].as_str()?.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_on_the_node_watch_reloads_the_credentials() {
    let mut api = api_with_nodes(NODE, &[NODE]).await;
    let namespace = json!({"metadata": {"name": NAMESPACE}});
    api.admin("POST", "/api/v1/namespaces", Some(&namespace))
        .await;
    service_account(&api, "first").await;
    service_account(&api, "second").await;

    // The kubeconfig names its token file through a symlink into another
    // directory: a change there makes no event where the agent watches,
    // so only a refusal can tell the agent that its token changed.
    let root = tempfile::tempdir().unwrap();
    let (links, real) = (root.path().join("links"), root.path().join("real"));
    std::fs::create_dir_all(&links).unwrap();
    std::fs::create_dir_all(&real).unwrap();
    let token_file = real.join("token");
    replace_token(
        &token_file,
        &api.service_account_token(NAMESPACE, "first", None).await,
    );
    std::os::unix::fs::symlink(&token_file, links.join("token")).unwrap();
    let kubeconfig = root.path().join("kubeconfig");
    api.write_token_file_kubeconfig(&kubeconfig, &links.join("token"));

    // Pods are not served: the Node and CSINode watches are all it sends.
    let _agent = publishing_agent_as(&kubeconfig, NODE, root.path(), &["--pods", "off"]);
    let _plugin = example_device_plugin(root.path(), RESOURCE, 2);
    node_when(&api, NODE, "devices", |n| has(n, RESOURCE, "2", "2")).await;
    let first = format!("system:serviceaccount:{NAMESPACE}:first");
    eventually("the agent known as the first account", TIMEOUT, || async {
        (agent_user(root.path()).await? == first).then_some(())
    })
    .await;

    // The first account goes, and with it its token; the second's takes
    // its place unannounced. The API server restarts, so the watches list
    // again, with the old token: 401.
    replace_token(
        &token_file,
        &api.service_account_token(NAMESPACE, "second", None).await,
    );
    api.admin(
        "DELETE",
        &format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/first"),
        None,
    )
    .await;
    api.stop_apiserver().await;
    api.start_apiserver().await;

    let second = format!("system:serviceaccount:{NAMESPACE}:second");
    eventually("the agent known as the second account", TIMEOUT, || async {
        (agent_user(root.path()).await? == second).then_some(())
    })
    .await;
    // The Node watch works with the new token: another writer's change to
    // the status is repaired.
    let patch = json!({"status": {"capacity": {RESOURCE: "9"}, "allocatable": {RESOURCE: "9"}}});
    let answer = api
        .request(
            Identity::Admin,
            "PATCH",
            &format!("/api/v1/nodes/{NODE}/status"),
            Some(&patch),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    node_when(&api, NODE, "the status repaired", |n| {
        has(n, RESOURCE, "2", "2")
    })
    .await;
}

async fn csinode(api: &KubeApi) -> Option<Value> {
    let found = api
        .request(
            Identity::Admin,
            "GET",
            &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}"),
            None,
        )
        .await;
    (found.status == 200).then_some(found.body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csinode_deleted_by_another_writer_comes_back_within_the_recheck_period() {
    const RECHECK: Duration = Duration::from_secs(3);
    let api = api_with_nodes(NODE, &[NODE]).await;
    let root = tempfile::tempdir().unwrap();
    // The node's own credentials: the CSINode may be read, not watched.
    let _agent = publishing_agent_as(
        &api.node_kubeconfig(),
        NODE,
        root.path(),
        &["--pods", "off", "--csinode-recheck", "3s"],
    );
    let socket = csi_socket(root.path(), "csi.example.com");
    let _driver = csi_driver(&socket, "csi.example.com", "id-1", "zone-a");
    let _registrar = csi_registrar(root.path(), &socket);
    eventually("the CSINode entry", TIMEOUT, || async {
        let found = csinode(&api).await?;
        (found["spec"]["drivers"][0]["nodeID"] == "id-1").then_some(())
    })
    .await;

    // Deleting the CSINode changes nothing on the Node: only the periodic
    // read finds it gone.
    api.admin(
        "DELETE",
        &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}"),
        None,
    )
    .await;
    let deleted = tokio::time::Instant::now();
    // The read period, a fifth more at random, and the write.
    let within = RECHECK.mul_f64(1.2) + Duration::from_secs(2);
    eventually("the CSINode made again", within, || async {
        let found = csinode(&api).await?;
        (found["spec"]["drivers"][0]["nodeID"] == "id-1").then_some(())
    })
    .await;
    tracing::info!(after = ?deleted.elapsed(), "the CSINode is back");
}

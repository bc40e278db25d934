//! The DaemonSet manifests of `packaging/kubernetes/` against a real
//! kube-apiserver: every object is accepted as written, and each program,
//! started with its container's arguments and the ServiceAccount the
//! manifest gives it, does its work with the RBAC the manifest grants (a
//! token the API server issues for that ServiceAccount stands for the pod's
//! mounted one; no kubelet runs the pods).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use ::kube::Api;
use common::kube::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::Value;
use tokio::process::Command;

const NODE: &str = "node-1";
const RESOURCE: &str = "example.com/device";

fn manifest(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../packaging/kubernetes/{name}"))
}

/// The documents of a multi-document YAML file.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|document: &Value| !document.is_null())
        .collect()
}

/// Where objects of `object`'s kind are created.
fn collection(object: &Value) -> String {
    let namespace = object["metadata"]["namespace"].as_str();
    let (base, plural) = match object["kind"].as_str().unwrap() {
        "Namespace" => ("/api/v1", "namespaces"),
        "ServiceAccount" => ("/api/v1", "serviceaccounts"),
        "ClusterRole" => ("/apis/rbac.authorization.k8s.io/v1", "clusterroles"),
        "ClusterRoleBinding" => ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings"),
        "DeviceClass" => ("/apis/resource.k8s.io/v1", "deviceclasses"),
        "DaemonSet" => ("/apis/apps/v1", "daemonsets"),
        other => panic!("no collection known for kind {other}"),
    };
    match namespace {
        Some(namespace) => format!("{base}/namespaces/{namespace}/{plural}"),
        None => format!("{base}/{plural}"),
    }
}

/// Creates every object of the manifest as the admin, as `kubectl apply`
/// would, and returns them.
async fn apply(api: &KubeApi, name: &str) -> Vec<Value> {
    let objects = documents(&manifest(name));
    for object in &objects {
        let answer = api
            .request(Identity::Admin, "POST", &collection(object), Some(object))
            .await;
        assert_eq!(
            answer.status, 201,
            "{name}: {} {} refused: {}",
            object["kind"], object["metadata"]["name"], answer.body
        );
    }
    objects
}

/// The one container of the manifest's DaemonSet and its ServiceAccount.
fn daemon_set(objects: &[Value]) -> (Value, (String, String)) {
    let set = objects.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
    let pod = &set["spec"]["template"]["spec"];
    let account = (
        set["metadata"]["namespace"].as_str().unwrap().to_string(),
        pod["serviceAccountName"].as_str().unwrap().to_string(),
    );
    let env: Vec<&str> = pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"NODE_NAME"),
        "NODE_NAME from the downward API"
    );
    (pod["containers"][0].clone(), account)
}

/// The container's arguments with the pod's variables and paths as they
/// are in this test.
fn arguments(container: &Value, replace: &[(&str, String)]) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            replace
                .iter()
                .find(|(from, _)| *from == a)
                .map_or_else(|| a.to_string(), |(_, to)| to.clone())
        })
        .collect()
}

async fn service_account_client(kubeconfig: &Path) -> ::kube::Client {
    let config = ::kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = ::kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    ::kube::Client::try_from(config).unwrap()
}

/// Whether the identity of `client` may read a missing pod and claim: the
/// answer is 404, not 403.
async fn reads_pods_and_claims(client: &::kube::Client) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(pods.get_opt("missing").await.unwrap().is_none());
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    assert!(claims.get_opt("missing").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_daemon_set_is_accepted_and_its_service_account_may_do_the_agents_work() {
    let api = api_with_nodes(NODE, &[NODE]).await;
    let objects = apply(&api, "nodeplugins.yaml").await;
    let (container, (namespace, account)) = daemon_set(&objects);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sa.kubeconfig");
    api.write_service_account_kubeconfig(&namespace, &account, None, &kubeconfig)
        .await;
    reads_pods_and_claims(&service_account_client(&kubeconfig).await).await;

    // The container's command line, with the packaged config file, the
    // token for its ServiceAccount and the node's name from NODE_NAME.
    let root = tempfile::tempdir().unwrap();
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/nodeplugins.toml");
    let mut args = arguments(
        &container,
        &[
            (
                "/etc/nodeplugins/nodeplugins.toml",
                config.display().to_string(),
            ),
            ("in-cluster", kubeconfig.display().to_string()),
        ],
    );
    assert_eq!(args[0], "run");
    args.remove(0);
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .arg("run")
        .args(&args)
        .arg("--root-dir")
        .arg(root.path())
        .args(["--metrics-addr", "127.0.0.1:0", "--log-format", "text"])
        .env("NODE_NAME", NODE);
    let _agent = ChildProcess::spawn("nodeplugins", command);

    // Device capacity on the Node's status.
    let _plugin = example_device_plugin(root.path(), RESOURCE, 2);
    node_when(&api, NODE, "devices published", |n| {
        has(n, RESOURCE, "2", "2")
    })
    .await;
    // A CSI driver on the Node and its CSINode.
    let socket = csi_socket(root.path(), "csi.example.com");
    let _driver = csi_driver(&socket, "csi.example.com", "id-1", "zone-a");
    let _registrar = csi_registrar(root.path(), &socket);
    eventually("the CSINode entry", TIMEOUT, || async {
        let csinode = api
            .admin(
                "GET",
                &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}"),
                None,
            )
            .await;
        (csinode["spec"]["drivers"][0]["nodeID"] == "id-1").then_some(())
    })
    .await;
    // Nothing was refused: the agent says who it is and has no error.
    let status = eventually("the agent's API status", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        let user = status["kube_api"]["user"].as_str()?.to_string();
        (status["kube_api"]["pending"] == serde_json::json!([])).then_some((user, status))
    })
    .await;
    assert_eq!(
        status.0,
        format!("system:serviceaccount:{namespace}:{account}")
    );
    assert!(status.1["kube_api"]["last_error"].is_null(), "{}", status.1);
    // The node's pods are watched with the ServiceAccount's grants.
    eventually("the node's pods listed", TIMEOUT, || async {
        let out = cli(root.path(), &["pods", "-o", "json"]).await;
        let pods: Value = serde_json::from_slice(&out.stdout).ok()?;
        (pods["serving"] == true && pods["listed"] == true).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dra_driver_daemon_set_is_accepted_and_its_service_account_may_publish_slices() {
    let api = api_with_nodes(NODE, &[NODE]).await;
    let objects = apply(&api, "example-dra-driver.yaml").await;
    let (container, (namespace, account)) = daemon_set(&objects);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sa.kubeconfig");
    api.write_service_account_kubeconfig(&namespace, &account, None, &kubeconfig)
        .await;

    let root = tempfile::tempdir().unwrap();
    let cdi = tempfile::tempdir().unwrap();
    let args = arguments(
        &container,
        &[
            ("/var/lib/kubelet", root.path().display().to_string()),
            ("/var/run/cdi", cdi.path().display().to_string()),
            ("in-cluster", kubeconfig.display().to_string()),
            ("$(NODE_NAME)", NODE.to_string()),
            (
                "$(POD_UID)",
                "5e1f0c2a-0000-4000-8000-000000000001".to_string(),
            ),
        ],
    );
    let program = container["command"][0].as_str().unwrap();
    let program = Path::new(program).file_name().unwrap().to_str().unwrap();
    let mut command = Command::new(binary("nodeplugins-sdk-bins", program));
    command.args(&args);
    let _driver = ChildProcess::spawn(program, command);

    // Its GPUs as a slice owned by the Node, matched by the DeviceClass.
    let slice = eventually("the driver's ResourceSlice", TIMEOUT, || async {
        let slices = api
            .admin("GET", "/apis/resource.k8s.io/v1/resourceslices", None)
            .await;
        let slice = slices["items"].as_array()?.first()?.clone();
        (slice["spec"]["devices"].as_array()?.len() == 4).then_some(slice)
    })
    .await;
    assert_eq!(slice["spec"]["driver"], "dra.example.com");
    assert_eq!(slice["spec"]["nodeName"], NODE);
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Node");
    let class = objects.iter().find(|o| o["kind"] == "DeviceClass").unwrap();
    assert!(
        class["spec"]["selectors"][0]["cel"]["expression"]
            .as_str()
            .unwrap()
            .contains(r#""dra.example.com""#)
    );
    // It registered under the host's registry directory it mounts.
    eventually("its registration socket", TIMEOUT, || async {
        let entries = std::fs::read_dir(root.path().join("plugins_registry")).ok()?;
        (entries.count() == 1).then_some(())
    })
    .await;
    // It may read the claims it prepares.
    let client = service_account_client(&kubeconfig).await;
    let claims: Api<ResourceClaim> = Api::namespaced(client, "default");
    assert!(claims.get_opt("missing").await.unwrap().is_none());
}

//! The DaemonSet manifests of `packaging/kubernetes/` against a real
//! kube-apiserver: every object is accepted as written, and each program,
//! started with its container's arguments and the ServiceAccount the
//! manifest gives it, does its work with the RBAC the manifest grants and
//! within the policies that confine it to its node (a token the API server
//! issues for that ServiceAccount, bound to a pod on the node, stands for
//! the pod's mounted one; no kubelet runs the pods).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use ::kube::Api;
use common::kube::*;
use common::packaging::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::Value;
use tokio::process::Command;

const NODE: &str = "node-1";
const OTHER: &str = "node-2";
const RESOURCE: &str = "example.com/device";

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
    let api = api_with_nodes(NODE, &[NODE, OTHER]).await;
    let objects = apply(&api, "nodeplugins.yaml").await;
    let (container, (namespace, account)) = daemon_set(&objects);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sa.kubeconfig");
    let pod = daemon_pod(&api, &namespace, &account, NODE).await;
    api.write_service_account_kubeconfig(&namespace, &account, Some(&pod), &kubeconfig)
        .await;
    // Its writes pass the policy that confines it to its node.
    let token = api
        .service_account_token(&namespace, &account, Some(&pod))
        .await;
    let label = serde_json::json!({"metadata": {"labels": {"probe": "1"}}});
    policy_enforced(
        &api,
        &token,
        "PATCH",
        &format!("/api/v1/nodes/{OTHER}"),
        &label,
    )
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
    // It leaves the node's pods to the kubelet: its ServiceAccount may not
    // write their status, and its container has no runtime for them.
    let out = cli(root.path(), &["pods", "-o", "json"]).await;
    let pods: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pods["serving"], false, "{pods}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dra_driver_daemon_set_is_accepted_and_its_service_account_may_publish_slices() {
    let api = api_with_nodes(NODE, &[NODE, OTHER]).await;
    let objects = apply(&api, "example-dra-driver.yaml").await;
    let (container, (namespace, account)) = daemon_set(&objects);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sa.kubeconfig");
    let pod = daemon_pod(&api, &namespace, &account, NODE).await;
    api.write_service_account_kubeconfig(&namespace, &account, Some(&pod), &kubeconfig)
        .await;
    let token = api
        .service_account_token(&namespace, &account, Some(&pod))
        .await;
    let probe = slice("probe", OTHER, "dra.example.com");
    let slices = "/apis/resource.k8s.io/v1/resourceslices";
    policy_enforced(&api, &token, "POST", slices, &probe).await;

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

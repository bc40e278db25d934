//! The manifests of `packaging/kubernetes/` applied to a real API server,
//! and the pods their DaemonSets would run, with the tokens the kubelet
//! would give those pods.

use std::path::{Path, PathBuf};

use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

pub fn manifest(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../packaging/kubernetes/{name}"))
}

/// The documents of a multi-document YAML file.
pub fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|document: &Value| !document.is_null())
        .collect()
}

/// Where objects of `object`'s kind are created.
pub fn collection(object: &Value) -> String {
    let namespace = object["metadata"]["namespace"].as_str();
    let (base, plural) = match object["kind"].as_str().unwrap() {
        "Namespace" => ("/api/v1", "namespaces"),
        "ServiceAccount" => ("/api/v1", "serviceaccounts"),
        "ClusterRole" => ("/apis/rbac.authorization.k8s.io/v1", "clusterroles"),
        "ClusterRoleBinding" => ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings"),
        "DeviceClass" => ("/apis/resource.k8s.io/v1", "deviceclasses"),
        "DaemonSet" => ("/apis/apps/v1", "daemonsets"),
        "ValidatingAdmissionPolicy" => (
            "/apis/admissionregistration.k8s.io/v1",
            "validatingadmissionpolicies",
        ),
        "ValidatingAdmissionPolicyBinding" => (
            "/apis/admissionregistration.k8s.io/v1",
            "validatingadmissionpolicybindings",
        ),
        other => panic!("no collection known for kind {other}"),
    };
    match namespace {
        Some(namespace) => format!("{base}/namespaces/{namespace}/{plural}"),
        None => format!("{base}/{plural}"),
    }
}

/// Creates every object of the manifest as the admin, as `kubectl apply`
/// would, and returns them.
pub async fn apply(api: &KubeApi, name: &str) -> Vec<Value> {
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
pub fn daemon_set(objects: &[Value]) -> (Value, (String, String)) {
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
pub fn arguments(container: &Value, replace: &[(&str, String)]) -> Vec<String> {
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

/// Pod `<account>-<node>` of ServiceAccount `namespace/account`, bound to
/// `node` as the DaemonSet's controller would make it (no kubelet runs
/// it); its name. A token bound to it, as the kubelet gives the pod, names
/// the node ([`KubeApi::service_account_token`]).
pub async fn daemon_pod(api: &KubeApi, namespace: &str, account: &str, node: &str) -> String {
    let name = format!("{account}-{node}");
    let pod = json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "main", "image": "nodeplugins:latest"}],
        },
    });
    api.admin(
        "POST",
        &format!("/api/v1/namespaces/{namespace}/pods"),
        Some(&pod),
    )
    .await;
    name
}

/// Waits until the API server enforces a manifest's policy: a dry run of
/// `method path` with `body` as `token`, a write the policy forbids, is
/// refused (403). Nothing is written while the policy is not yet loaded.
pub async fn policy_enforced(api: &KubeApi, token: &str, method: &str, path: &str, body: &Value) {
    let path = match path.contains('?') {
        true => format!("{path}&dryRun=All"),
        false => format!("{path}?dryRun=All"),
    };
    eventually("the policy enforced", TIMEOUT, || async {
        let answer = api
            .request_as(token, method, &path, Some(body))
            .await
            .ok()?;
        (answer.status == 403).then_some(())
    })
    .await;
}

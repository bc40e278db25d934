//! ResourceClaims made by hand, as the scheduler would allocate them, for
//! tests without a scheduler.

use nodeplugins_test_support::kube_api::KubeApi;
use serde_json::json;

const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

/// Claim `default/NAME` allocated to `device` of `driver` in pool `node`
/// (and to a device of another driver). Returns the claim's UID.
pub async fn allocated_claim(
    api: &KubeApi,
    name: &str,
    node: &str,
    driver: &str,
    device: &str,
) -> String {
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    });
    let created = api.admin("POST", CLAIMS, Some(&claim)).await;
    let allocation = json!({"status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": driver, "pool": node, "device": device},
        {"request": "gpu", "driver": "other.example.com", "pool": node, "device": "x"},
    ]}}}});
    api.admin(
        "PATCH",
        &format!("{CLAIMS}/{name}/status"),
        Some(&allocation),
    )
    .await;
    created["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A pod on `node` using claim `default/CLAIM`, so that the node may read
/// the claim.
pub async fn pod_using(api: &KubeApi, claim: &str, node: &str) {
    api.ensure_default_service_account("default").await;
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("pod-{claim}")},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "example.invalid/app"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    });
    api.admin("POST", "/api/v1/namespaces/default/pods", Some(&pod))
        .await;
}

/// Deletes claim `default/NAME`.
pub async fn delete_claim(api: &KubeApi, name: &str) {
    api.admin("DELETE", &format!("{CLAIMS}/{name}"), None).await;
}

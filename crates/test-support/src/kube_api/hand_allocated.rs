//! Pods and claims as the scheduler would leave them, made by hand for
//! benchmarks that run no scheduler: the claim allocated and reserved for
//! its pod, the pod not bound yet, so the benchmark times from its binding.

use serde_json::json;

use super::KubeApi;

const PODS: &str = "/api/v1/namespaces/default/pods";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

/// What a hand-allocated pod asks for.
#[derive(Debug, Clone, Copy)]
pub struct PodDevices<'a> {
    /// The device plugin resource its container asks one of.
    pub resource: &'a str,
    /// The DeviceClass of its claim's one request.
    pub class: &'a str,
    /// The DRA driver of the device its claim is allocated.
    pub driver: &'a str,
    /// The pool of that device.
    pub pool: &'a str,
    /// The device.
    pub device: &'a str,
}

impl KubeApi {
    /// Pod `default/NAME`, not bound yet, whose container asks for one
    /// device of `devices.resource` and uses claim `default/NAME`; the
    /// claim allocated `devices.device` and reserved for the pod, as the
    /// scheduler leaves it. Three requests as the admin.
    pub async fn create_pod_with_allocated_claim(&self, name: &str, devices: PodDevices<'_>) {
        let PodDevices {
            resource,
            class,
            driver,
            pool,
            device,
        } = devices;
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
        });
        self.admin("POST", CLAIMS, Some(&claim)).await;
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "automountServiceAccountToken": false,
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [{"name": "main", "image": "example.invalid/app",
                    "resources": {"limits": {resource: "1"}, "requests": {resource: "1"},
                        "claims": [{"name": "gpu"}]}}],
            },
        });
        let created = self.admin("POST", PODS, Some(&pod)).await;
        let status = json!({"status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": driver, "pool": pool, "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": created["metadata"]["uid"]}],
        }});
        self.admin("PATCH", &format!("{CLAIMS}/{name}/status"), Some(&status))
            .await;
    }
}

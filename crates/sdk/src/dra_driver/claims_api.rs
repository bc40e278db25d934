//! Reading the claims a driver prepares from the API server (feature
//! `kube`), as the Go helper does: each ResourceClaim is fetched by
//! namespace and name (all of a call's claims at once, before the call is
//! serialized, so a slow API server holds up no other call); one without an
//! allocation, or that was replaced (another UID), gets an error of its own.
//! The driver gets the claim as read, and a typed view of what was
//! allocated to it: its own results and opaque configurations. Claims are
//! read in the version of the API the server serves (v1, or v1beta2).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};

use super::claim::{
    AllocatedDevice, Allocation, ClaimRef, ConfigSource, DeviceConfig, DeviceToleration,
};
use super::resource_api::{ResourceApi, ResourceVersions};

/// Fetches claims with a client.
#[derive(Clone)]
pub(crate) struct ClaimsApi {
    /// The client, and the API version the server serves.
    pub(crate) versions: ResourceVersions,
    pub(crate) driver: String,
    pub(crate) timeout: Duration,
}

/// A claim as read: what was allocated to this driver, and the object.
pub(crate) type ReadClaim = (Allocation, Arc<ResourceClaim>);

impl ClaimsApi {
    /// `claim` as the API server has it, or why it cannot be prepared:
    /// the Go helper's checks and messages, in its order.
    pub(crate) async fn read(&self, claim: &ClaimRef) -> Result<ReadClaim, String> {
        let what = format!("{}/{}", claim.namespace, claim.name);
        let get = async {
            let version = self.versions.get().await?;
            let client = self.versions.client().clone();
            let claims =
                ResourceApi::<ResourceClaim>::namespaced(client, &claim.namespace, version);
            claims.get(&claim.name).await
        };
        let current = match tokio::time::timeout(self.timeout, get).await {
            Ok(Ok(current)) => current,
            Ok(Err(e)) => return Err(format!("retrieve claim {what}: {e}")),
            Err(_) => {
                return Err(format!(
                    "retrieve claim {what}: no answer within {:?}",
                    self.timeout
                ));
            }
        };
        let Some(allocation) = allocation_for(&self.driver, &current) else {
            return Err(format!("claim {what} not allocated"));
        };
        if current.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return Err(format!("claim {what} got replaced"));
        }
        Ok((allocation, Arc::new(current)))
    }
}

/// What `claim`'s allocation gives `driver`, or `None` if it is not
/// allocated.
pub(crate) fn allocation_for(driver: &str, claim: &ResourceClaim) -> Option<Allocation> {
    let allocation = claim.status.as_ref()?.allocation.as_ref()?;
    let Some(devices) = &allocation.devices else {
        return Some(Allocation::default());
    };
    let results = devices
        .results
        .iter()
        .flatten()
        .filter(|r| r.driver == driver)
        .map(allocated_device)
        .collect();
    let config = devices
        .config
        .iter()
        .flatten()
        .filter_map(|c| {
            let opaque = c.opaque.as_ref().filter(|o| o.driver == driver)?;
            Some(DeviceConfig {
                source: match c.source.as_str() {
                    "FromClass" => ConfigSource::FromClass,
                    _ => ConfigSource::FromClaim,
                },
                requests: c.requests.clone().unwrap_or_default(),
                parameters: opaque.parameters.0.clone(),
            })
        })
        .collect();
    Some(Allocation {
        devices: results,
        config,
    })
}

fn allocated_device(result: &DeviceRequestAllocationResult) -> AllocatedDevice {
    AllocatedDevice {
        request: result.request.clone(),
        pool: result.pool.clone(),
        device: result.device.clone(),
        admin_access: result.admin_access.unwrap_or(false),
        share_id: result.share_id.clone(),
        consumed_capacity: result
            .consumed_capacity
            .iter()
            .flatten()
            .map(|(name, quantity)| (name.clone(), quantity.0.clone()))
            .collect(),
        tolerations: result
            .tolerations
            .iter()
            .flatten()
            .map(|t| DeviceToleration {
                key: t.key.clone().unwrap_or_default(),
                operator: t.operator.clone().unwrap_or_default(),
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.clone().unwrap_or_default(),
                toleration_seconds: t.toleration_seconds,
            })
            .collect(),
        binding_conditions: result.binding_conditions.clone().unwrap_or_default(),
        binding_failure_conditions: result
            .binding_failure_conditions
            .clone()
            .unwrap_or_default(),
        skip_node_operations: skip_node_operations(result),
    }
}

// The application picks the Kubernetes version; the field came in 1.37.
k8s_openapi::k8s_if_ge_1_37! {
    /// The node operations the allocation asks the driver to skip.
    fn skip_node_operations(result: &DeviceRequestAllocationResult) -> Vec<String> {
        result.skip_node_operations.clone().unwrap_or_default()
    }
}
k8s_openapi::k8s_if_le_1_36! {
    /// None before Kubernetes 1.37, which has no such field.
    fn skip_node_operations(_: &DeviceRequestAllocationResult) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_gets_its_own_results_and_configs_with_every_field() {
        let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "c", "uid": "u"},
            "spec": {},
            "status": {"allocation": {"devices": {
                "results": [
                    {"request": "gpu/big", "driver": "gpu.example.com", "pool": "p", "device": "d0",
                     "adminAccess": true, "shareID": "s-1", "consumedCapacity": {"memory": "4Gi"},
                     "tolerations": [{"key": "hot", "operator": "Exists", "effect": "NoSchedule"}],
                     "bindingConditions": ["ready"], "bindingFailureConditions": ["broken"]},
                    {"request": "nic", "driver": "nic.example.com", "pool": "p", "device": "n0"},
                ],
                "config": [
                    {"source": "FromClass", "opaque": {"driver": "gpu.example.com", "parameters": {"mode": "exclusive"}}},
                    {"source": "FromClaim", "requests": ["gpu"],
                     "opaque": {"driver": "gpu.example.com", "parameters": {"mode": "shared"}}},
                    {"source": "FromClaim", "opaque": {"driver": "nic.example.com", "parameters": {"mtu": 9000}}},
                ],
            }}},
        }))
        .unwrap();
        let allocation = allocation_for("gpu.example.com", &claim).unwrap();
        assert_eq!(allocation.devices.len(), 1, "the NIC is another driver's");
        let gpu = &allocation.devices[0];
        assert_eq!((gpu.base_request(), gpu.subrequest()), ("gpu", Some("big")));
        assert!(gpu.admin_access);
        assert_eq!(gpu.share_id.as_deref(), Some("s-1"));
        assert_eq!(gpu.consumed_capacity["memory"], "4Gi");
        assert_eq!(gpu.tolerations[0].key, "hot");
        assert_eq!(gpu.binding_conditions, ["ready"]);
        assert_eq!(gpu.binding_failure_conditions, ["broken"]);
        let modes: Vec<&serde_json::Value> = allocation
            .config_for(gpu)
            .map(|c| &c.parameters["mode"])
            .collect();
        assert_eq!(modes, ["exclusive", "shared"], "class first, then claim");
        assert_eq!(allocation.config[0].source, ConfigSource::FromClass);
        assert_eq!(allocation.config.len(), 2, "the NIC's config is left out");
    }

    #[test]
    fn a_claim_without_an_allocation_has_none() {
        let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "c", "uid": "u"},
            "spec": {},
        }))
        .unwrap();
        assert!(allocation_for("gpu.example.com", &claim).is_none());
    }
}

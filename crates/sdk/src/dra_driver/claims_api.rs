//! Reading the claims a driver prepares from the API server (feature
//! `kube`): each ResourceClaim is fetched by namespace and name; one that
//! was replaced (another UID) or has no allocation gets an error of its own,
//! and the driver gets the allocation results for its own driver name.

use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;

use super::claim::{AllocatedDevice, ClaimRef};

/// Fetches claims with a client.
#[derive(Clone)]
pub(crate) struct ClaimsApi {
    pub(crate) client: kube::Client,
    pub(crate) driver: String,
    pub(crate) timeout: Duration,
}

impl ClaimsApi {
    /// The devices allocated to this driver for `claim`, or why it cannot
    /// be prepared.
    pub(crate) async fn allocation(
        &self,
        claim: &ClaimRef,
    ) -> Result<Vec<AllocatedDevice>, String> {
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let what = format!("{}/{}", claim.namespace, claim.name);
        let current = match tokio::time::timeout(self.timeout, claims.get(&claim.name)).await {
            Ok(Ok(current)) => current,
            Ok(Err(e)) => return Err(format!("retrieve claim {what}: {e}")),
            Err(_) => {
                return Err(format!(
                    "retrieve claim {what}: no answer within {:?}",
                    self.timeout
                ));
            }
        };
        if current.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return Err(format!("claim {what} got replaced"));
        }
        let Some(allocation) = current.status.and_then(|s| s.allocation) else {
            return Err(format!("claim {what} not allocated"));
        };
        Ok(allocation
            .devices
            .and_then(|d| d.results)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.driver == self.driver)
            .map(|r| AllocatedDevice {
                request: r.request,
                pool: r.pool,
                device: r.device,
            })
            .collect())
    }
}

//! The `DRAPlugin` services (v1, and v1beta1 converted to v1) calling the
//! author's [`DraDriver`].

use std::sync::Arc;

use nodeplugins_api::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use std::collections::HashMap;

use super::DraDriver;
use super::cdi::CdiSpecs;
use super::claim::{AllocatedDevice, Claim, ClaimRef, PreparedClaim, PreparedDevice};
#[cfg(feature = "kube")]
use super::claims_api::ClaimsApi;
use super::serializer::Serializer;
use super::store::ClaimStore;

pub(super) struct Service {
    pub(super) driver: Arc<dyn DraDriver>,
    pub(super) serializer: Serializer,
    pub(super) store: ClaimStore,
    pub(super) cdi: Option<CdiSpecs>,
    #[cfg(feature = "kube")]
    pub(super) claims_api: Option<ClaimsApi>,
}

/// The request names the kubelet is told a device serves: the base
/// request of each (`gpu` for a `firstAvailable` subrequest `gpu/big`),
/// each once, as the Go helper sends them. The kubelet gives a container
/// asking for request `gpu` the devices whose names include exactly `gpu`.
fn base_requests(requests: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(requests.len());
    for request in requests {
        let base = request.split_once('/').map_or(request.as_str(), |(b, _)| b);
        if !names.iter().any(|n| n == base) {
            names.push(base.to_string());
        }
    }
    names
}

fn wire(devices: &[PreparedDevice]) -> Vec<v1::Device> {
    devices
        .iter()
        .map(|d| v1::Device {
            request_names: base_requests(&d.requests),
            pool_name: d.pool.clone(),
            device_name: d.device.clone(),
            cdi_device_ids: d.cdi_device_ids.clone(),
            share_id: d.share_id.clone(),
        })
        .collect()
}

fn prepared(devices: &[PreparedDevice]) -> v1::NodePrepareResourceResponse {
    v1::NodePrepareResourceResponse {
        devices: wire(devices),
        error: String::new(),
    }
}

fn failed(error: String) -> v1::NodePrepareResourceResponse {
    v1::NodePrepareResourceResponse {
        devices: Vec::new(),
        error,
    }
}

fn claim_ref(claim: v1::Claim) -> ClaimRef {
    ClaimRef {
        namespace: claim.namespace,
        name: claim.name,
        uid: claim.uid,
    }
}

impl Service {
    /// The devices allocated to the driver for `claim`, with an API client.
    async fn allocation(&self, claim: &ClaimRef) -> Result<Option<Vec<AllocatedDevice>>, String> {
        #[cfg(feature = "kube")]
        if let Some(api) = &self.claims_api {
            return api.allocation(claim).await.map(Some);
        }
        let _ = claim;
        Ok(None)
    }

    async fn prepare(
        &self,
        request: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let mut records =
            self.store.load().await.map_err(|e| {
                Status::unavailable(format!("cannot read the prepared claims: {e}"))
            })?;
        let mut results = HashMap::new();
        let mut to_prepare = Vec::new();
        for claim in request.claims.into_iter().map(claim_ref) {
            if let Some(record) = records.get(&claim.uid) {
                results.insert(claim.uid.clone(), prepared(&record.devices));
                continue;
            }
            match self.allocation(&claim).await {
                Ok(allocation) => to_prepare.push(Claim { claim, allocation }),
                Err(error) => {
                    results.insert(claim.uid.clone(), failed(error));
                }
            }
        }
        if to_prepare.is_empty() {
            return Ok(v1::NodePrepareResourcesResponse { claims: results });
        }
        let asked: HashMap<String, ClaimRef> = to_prepare
            .iter()
            .map(|c| (c.claim.uid.clone(), c.claim.clone()))
            .collect();
        let mut changed = false;
        for (uid, result) in self.driver.prepare(to_prepare).await {
            let Some(claim) = asked.get(&uid) else {
                continue;
            };
            let devices = match result {
                Ok(devices) => devices,
                Err(error) => {
                    results.insert(uid, failed(error));
                    continue;
                }
            };
            let mut record = PreparedClaim {
                claim: claim.clone(),
                devices,
            };
            if let Some(cdi) = &self.cdi {
                cdi.assign_ids(&mut record);
                if let Err(e) = cdi.write(&record) {
                    let path = cdi.path(&uid);
                    results.insert(
                        uid,
                        failed(format!("cannot write the CDI spec {path:?}: {e}")),
                    );
                    continue;
                }
            }
            results.insert(uid.clone(), prepared(&record.devices));
            records.insert(uid, record);
            changed = true;
        }
        if changed && let Err(e) = self.store.save(&records).await {
            tracing::error!(error = %e, "prepared claims not recorded");
        }
        Ok(v1::NodePrepareResourcesResponse { claims: results })
    }

    async fn unprepare(
        &self,
        request: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let mut records =
            self.store.load().await.map_err(|e| {
                Status::unavailable(format!("cannot read the prepared claims: {e}"))
            })?;
        let claims: Vec<PreparedClaim> = request
            .claims
            .into_iter()
            .map(claim_ref)
            .map(|claim| match records.get(&claim.uid) {
                Some(record) => record.clone(),
                None => PreparedClaim {
                    claim,
                    devices: Vec::new(),
                },
            })
            .collect();
        let mut changed = false;
        let mut results = HashMap::new();
        for (uid, result) in self.driver.unprepare(claims).await {
            if result.is_ok() {
                if let Some(cdi) = &self.cdi
                    && let Err(e) = cdi.remove(&uid)
                {
                    tracing::warn!(claim = %uid, error = %e, "cannot remove the claim's CDI spec");
                }
                changed |= records.remove(&uid).is_some();
            }
            let error = result.err().unwrap_or_default();
            results.insert(uid, v1::NodeUnprepareResourceResponse { error });
        }
        if changed && let Err(e) = self.store.save(&records).await {
            tracing::error!(error = %e, "unprepared claims not recorded");
        }
        Ok(v1::NodeUnprepareResourcesResponse { claims: results })
    }

    /// Writes again the CDI spec of every recorded claim whose file is
    /// missing (after a reboot emptied `/var/run`).
    pub(super) async fn restore_cdi_specs(&self) {
        let Some(cdi) = &self.cdi else {
            return;
        };
        let records = match self.store.load().await {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the prepared claims");
                return;
            }
        };
        let mut written = 0;
        for record in records.values() {
            match cdi.ensure(record) {
                Ok(true) => written += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(claim = %record.claim.uid, error = %e, "cannot write the claim's CDI spec")
                }
            }
        }
        if written > 0 {
            tracing::info!(written, "CDI specs of prepared claims written again");
        }
    }
}

pub(super) struct V1(pub(super) Arc<Service>);
pub(super) struct V1beta1(pub(super) Arc<Service>);

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for V1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        self.0
            .prepare(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        self.0
            .unprepare(request.into_inner())
            .await
            .map(Response::new)
    }
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for V1beta1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let response = self.0.prepare(request.into_inner().into()).await?;
        Ok(Response::new(response.into()))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let response = self.0.unprepare(request.into_inner().into()).await?;
        Ok(Response::new(response.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subrequest_names_reach_the_kubelet_as_their_base_request_each_once() {
        let names = |requests: &[&str]| {
            base_requests(&requests.iter().map(|r| r.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(names(&["gpu/big"]), ["gpu"]);
        assert_eq!(names(&["gpu/big", "gpu/small", "nic"]), ["gpu", "nic"]);
        assert_eq!(names(&["plain"]), ["plain"]);
        assert!(names(&[]).is_empty());
    }
}

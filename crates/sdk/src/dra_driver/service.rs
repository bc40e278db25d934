//! The `DRAPlugin` services (v1, and v1beta1 converted to v1) calling the
//! author's [`DraDriver`].
//!
//! A prepare goes:
//!
//! 1. the claims already prepared (during this boot) are answered from the
//!    record; a claim prepared during an earlier boot is prepared again,
//!    and the driver is told what it got then;
//! 2. the others are read from the API server (all at once, before the
//!    call is serialized: a slow API server holds up no other call);
//! 3. under the serialization lock, each is recorded as being prepared
//!    (state `Interrupted`, with the devices allocated to the driver), so
//!    that a crash from here on leaves a record unprepare can release;
//! 4. the driver prepares them;
//! 5. the CDI spec files are written;
//! 6. the driver's answer is recorded (state `Prepared`);
//! 7. the kubelet is answered.
//!
//! A claim whose record cannot be written fails, with the error: before
//! the driver is called, nothing was prepared; after, the earlier record
//! stands and unprepare releases what the driver prepared.

use std::collections::HashMap;
use std::sync::Arc;

use nodeplugins_api::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use super::cdi::CdiSpecs;
use super::claim::{Claim, ClaimRef, PreparedClaim, PreparedDevice, PreparedState};
#[cfg(feature = "kube")]
use super::claims_api::ClaimsApi;
use super::driver::DraDriver;
use super::serializer::Serializer;
use super::stop_point::{Step, stop_point};
use super::store::ClaimStore;

pub(super) struct Service {
    pub(super) driver: Arc<dyn DraDriver>,
    pub(super) serializer: Serializer,
    pub(super) store: ClaimStore,
    /// This boot's identity, when known.
    pub(super) boot_id: Option<String>,
    pub(super) cdi: Option<CdiSpecs>,
    #[cfg(feature = "kube")]
    pub(super) claims_api: Option<ClaimsApi>,
}

/// The request names the kubelet is told a device serves: the base
/// request of each (`gpu` for a `firstAvailable` subrequest `gpu/big`), as
/// the Go helper sends them, each once (the helper keeps duplicates, which
/// read the same to the kubelet: it looks names up). The kubelet gives a
/// container asking for request `gpu` the devices whose names include
/// exactly `gpu`.
fn base_requests(requests: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(requests.len());
    for request in requests {
        let base = super::claim::base_request(request);
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

/// The record of a claim being prepared: the devices allocated to it, so
/// that unprepare can release them if nothing more is ever recorded.
fn interrupted(claim: &Claim, boot_id: Option<String>) -> PreparedClaim {
    PreparedClaim {
        claim: claim.claim.clone(),
        devices: claim
            .allocation
            .iter()
            .flat_map(|a| &a.devices)
            .map(PreparedDevice::allocated)
            .collect(),
        state: PreparedState::Interrupted,
        boot_id,
    }
}

/// Whether `record` is of a claim the driver prepared during boot `boot`
/// (a record or a boot of unknown identity counts as this boot's).
fn prepared_this_boot(record: &PreparedClaim, boot: Option<&str>) -> bool {
    record.state == PreparedState::Prepared
        && match (record.boot_id.as_deref(), boot) {
            (Some(recorded), Some(boot)) => recorded == boot,
            _ => true,
        }
}

impl Service {
    /// `claims` as the driver gets them: read from the API server when
    /// there is a client, all at once; a claim that cannot be prepared
    /// gets its error.
    async fn read_claims(&self, claims: Vec<ClaimRef>) -> Vec<Result<Claim, (String, String)>> {
        #[cfg(feature = "kube")]
        if let Some(api) = &self.claims_api {
            let reads = claims.into_iter().map(|claim| async move {
                match api.read(&claim).await {
                    Ok((allocation, object)) => Ok(Claim {
                        claim,
                        allocation: Some(allocation),
                        resource_claim: Some(object),
                        before_reboot: None,
                    }),
                    Err(error) => Err((claim.uid, error)),
                }
            });
            return futures::future::join_all(reads).await;
        }
        claims.into_iter().map(|c| Ok(Claim::new(c))).collect()
    }

    async fn prepare(
        &self,
        request: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, Status> {
        let mut results = HashMap::new();
        // 1. What is prepared already needs nothing more.
        let records =
            self.store.read().await.map_err(|e| {
                Status::unavailable(format!("cannot read the prepared claims: {e}"))
            })?;
        let boot = self.boot_id.as_deref();
        let mut unprepared = Vec::new();
        let mut before_reboot = HashMap::new();
        for claim in request.claims.into_iter().map(claim_ref) {
            match records.get(&claim.uid) {
                Some(record) if prepared_this_boot(record, boot) => {
                    results.insert(claim.uid, prepared(&record.devices));
                }
                Some(record) if record.state == PreparedState::Prepared => {
                    before_reboot.insert(claim.uid.clone(), record.devices.clone());
                    unprepared.push(claim);
                }
                _ => unprepared.push(claim),
            }
        }
        drop(records);
        if unprepared.is_empty() {
            return Ok(v1::NodePrepareResourcesResponse { claims: results });
        }
        // 2. The API reads, before the lock.
        let mut to_prepare = Vec::new();
        for read in self.read_claims(unprepared).await {
            match read {
                Ok(mut claim) => {
                    claim.before_reboot = before_reboot.remove(&claim.claim.uid);
                    to_prepare.push(claim);
                }
                Err((uid, error)) => {
                    results.insert(uid, failed(error));
                }
            }
        }
        if to_prepare.is_empty() {
            return Ok(v1::NodePrepareResourcesResponse { claims: results });
        }
        let _guard = self.serializer.acquire().await?;
        // 3. Recorded as being prepared; a claim another call prepared in
        //    the meantime is answered from its record.
        let intents: Vec<PreparedClaim> = to_prepare
            .iter()
            .map(|c| interrupted(c, self.boot_id.clone()))
            .collect();
        let boot = self.boot_id.clone();
        let recorded = self
            .store
            .update(move |records| {
                let mut done = HashMap::new();
                let mut changed = false;
                for intent in intents {
                    let uid = intent.claim.uid.clone();
                    match records.get_mut(&uid) {
                        Some(record) if prepared_this_boot(record, boot.as_deref()) => {
                            done.insert(uid, record.devices.clone());
                        }
                        // An earlier record keeps its devices when this
                        // read found none (no API client); one of another
                        // boot is being prepared again.
                        Some(record) if intent.devices.is_empty() => {
                            if record.state == PreparedState::Prepared {
                                record.state = PreparedState::Interrupted;
                                changed = true;
                            }
                        }
                        _ => {
                            records.insert(uid, intent);
                            changed = true;
                        }
                    }
                }
                (done, changed)
            })
            .await;
        let done = match recorded {
            Ok(done) => done,
            Err(e) => {
                for claim in to_prepare {
                    let error = format!("cannot record the claim before preparing it: {e}");
                    results.insert(claim.claim.uid, failed(error));
                }
                return Ok(v1::NodePrepareResourcesResponse { claims: results });
            }
        };
        to_prepare.retain(|c| match done.get(&c.claim.uid) {
            Some(devices) => {
                results.insert(c.claim.uid.clone(), prepared(devices));
                false
            }
            None => true,
        });
        if to_prepare.is_empty() {
            return Ok(v1::NodePrepareResourcesResponse { claims: results });
        }
        stop_point(Step::Recorded).await;

        // 4. The driver.
        let asked: HashMap<String, ClaimRef> = to_prepare
            .iter()
            .map(|c| (c.claim.uid.clone(), c.claim.clone()))
            .collect();
        let mut answers = self.driver.prepare(to_prepare).await;
        stop_point(Step::Answered).await;

        // 5. The CDI spec files of what it prepared.
        let mut answered = Vec::new();
        for (uid, claim) in &asked {
            let devices = match answers.remove(uid) {
                Some(Ok(devices)) => devices,
                Some(Err(error)) => {
                    results.insert(uid.clone(), failed(error));
                    continue;
                }
                None => {
                    let error = format!("the driver gave no result for claim {uid}");
                    results.insert(uid.clone(), failed(error));
                    continue;
                }
            };
            let mut record = PreparedClaim {
                claim: claim.clone(),
                devices,
                state: PreparedState::Prepared,
                boot_id: self.boot_id.clone(),
            };
            if let Some(cdi) = &self.cdi {
                cdi.assign_ids(&mut record);
                if let Err(e) = cdi.write(&record) {
                    let path = cdi.path(uid);
                    let error = format!("cannot write the CDI spec {path:?}: {e}");
                    results.insert(uid.clone(), failed(error));
                    continue;
                }
            }
            answered.push(record);
        }
        stop_point(Step::CdiWritten).await;

        // 6. Recorded as prepared.
        if !answered.is_empty() {
            let records = answered.clone();
            let saved = self
                .store
                .update(move |stored| {
                    for record in records {
                        stored.insert(record.claim.uid.clone(), record);
                    }
                    ((), true)
                })
                .await;
            for record in answered {
                let uid = record.claim.uid.clone();
                let result = match &saved {
                    Ok(()) => prepared(&record.devices),
                    Err(e) => {
                        tracing::error!(claim = %uid, error = %e, "prepared claim not recorded");
                        failed(format!(
                            "prepared, but the record could not be written: {e}"
                        ))
                    }
                };
                results.insert(uid, result);
            }
        }
        stop_point(Step::Saved).await;
        Ok(v1::NodePrepareResourcesResponse { claims: results })
    }

    async fn unprepare(
        &self,
        request: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let records =
            self.store.read().await.map_err(|e| {
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
                    state: PreparedState::Unknown,
                    boot_id: None,
                },
            })
            .collect();
        drop(records);
        let asked: Vec<String> = claims.iter().map(|c| c.claim.uid.clone()).collect();
        let mut answers = self.driver.unprepare(claims).await;
        let mut released = Vec::new();
        let mut results = HashMap::new();
        for uid in asked {
            let error = match answers.remove(&uid) {
                Some(Ok(())) => {
                    if let Some(cdi) = &self.cdi
                        && let Err(e) = cdi.remove(&uid)
                    {
                        tracing::warn!(claim = %uid, error = %e, "cannot remove the claim's CDI spec");
                    }
                    released.push(uid.clone());
                    String::new()
                }
                Some(Err(error)) => error,
                None => format!("the driver gave no result for claim {uid}"),
            };
            results.insert(uid, v1::NodeUnprepareResourceResponse { error });
        }
        if !released.is_empty() {
            let forget = released.clone();
            let removed = self
                .store
                .update(move |stored| {
                    let mut changed = false;
                    for uid in &forget {
                        changed |= stored.remove(uid).is_some();
                    }
                    ((), changed)
                })
                .await;
            if let Err(e) = removed {
                // The kubelet asks again; the driver's unprepare must
                // succeed a second time.
                for uid in released {
                    tracing::error!(claim = %uid, error = %e, "unprepared claim still recorded");
                    let error = format!("unprepared, but the record could not be removed: {e}");
                    results.insert(uid, v1::NodeUnprepareResourceResponse { error });
                }
            }
        }
        Ok(v1::NodeUnprepareResourcesResponse { claims: results })
    }

    /// Writes again the CDI spec of every prepared claim whose file is
    /// missing (after a reboot emptied `/var/run`).
    pub(super) async fn restore_cdi_specs(&self) {
        let Some(cdi) = &self.cdi else {
            return;
        };
        let records = match self.store.read().await {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the prepared claims");
                return;
            }
        };
        let mut written = 0;
        for record in records.values() {
            if record.state != PreparedState::Prepared {
                continue;
            }
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

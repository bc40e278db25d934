//! The service behind the `DRAPlugin` calls: prepare and unprepare around
//! the author's [`DraDriver`], with the record of prepared claims.
//!
//! A prepare goes:
//!
//! 1. the claims already prepared (during this boot) are answered from the
//!    record; a claim prepared during an earlier boot is prepared again,
//!    and the driver is told what it got then;
//! 2. the others are read from the API server (all at once, before the
//!    call is serialized: a slow API server holds up no other call);
//! 3. under the serialization lock, in one batch with every serialized
//!    call waiting for it (see [`super::batch`]), each is recorded as being
//!    prepared (state `Interrupted`, with the devices allocated to the
//!    driver), so that a crash from here on leaves a record unprepare can
//!    release;
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

use nodeplugins_api::dra::v1;
use tonic::Status;

use super::batch::{self, Queue};
use super::cdi::CdiSpecs;
use super::claim::{Claim, ClaimRef, PreparedClaim, PreparedState};
use super::claim_uid::ClaimUid;
#[cfg(feature = "kube")]
use super::claims_api::ClaimsApi;
use super::device_metadata::MetadataFiles;
use super::driver::DraDriver;
use super::serializer::Serializer;
use super::stop_point::{Step, stop_point};
use super::store::ClaimStore;
use super::wire::{claim_ref, failed, prepared};

pub(super) struct Service {
    pub(super) driver: Arc<dyn DraDriver>,
    pub(super) serializer: Serializer,
    /// Serialized prepares waiting for the next batch.
    pub(super) prepares: Queue<Claim, v1::NodePrepareResourceResponse>,
    /// Serialized unprepares waiting for the next batch.
    pub(super) unprepares: Queue<ClaimRef, v1::NodeUnprepareResourceResponse>,
    pub(super) store: ClaimStore,
    /// This boot's identity, when known.
    pub(super) boot_id: Option<String>,
    pub(super) cdi: Option<CdiSpecs>,
    /// The device metadata files, when on.
    pub(super) metadata: Option<MetadataFiles>,
    #[cfg(feature = "kube")]
    pub(super) claims_api: Option<ClaimsApi>,
}

impl Service {
    /// `claims` as the driver gets them: read from the API server when
    /// there is a client, all at once; a claim that cannot be prepared
    /// gets its error.
    async fn read_claims(&self, claims: Vec<ClaimRef>) -> Vec<Result<Claim, (ClaimUid, String)>> {
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

    /// Prepares the claims of `request`; see the module's steps.
    pub(super) async fn prepare(
        self: &Arc<Self>,
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
                Some(record) if record.prepared_during(boot) => {
                    results.insert(claim.uid.into(), prepared(&record.devices));
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
                    results.insert(uid.into(), failed(error));
                }
            }
        }
        if to_prepare.is_empty() {
            return Ok(v1::NodePrepareResourcesResponse { claims: results });
        }
        results.extend(self.prepare_serialized(to_prepare).await?);
        Ok(v1::NodePrepareResourcesResponse { claims: results })
    }

    /// Prepares `claims` (read, not prepared during this boot) under the
    /// serialization lock: at once when calls are not serialized, else in
    /// the next batch.
    async fn prepare_serialized(
        self: &Arc<Self>,
        claims: Vec<Claim>,
    ) -> Result<HashMap<String, v1::NodePrepareResourceResponse>, Status> {
        if matches!(self.serializer, Serializer::None) {
            return Ok(self.prepare_claims(claims).await);
        }
        let answer = self.prepares.push(claims);
        let service = self.clone();
        tokio::spawn(async move { service.prepare_batch().await });
        answer.await.map_err(|_| {
            Status::internal("the batch preparing the claims ended without answering")
        })?
    }

    /// Takes every waiting prepare once it holds the serialization lock,
    /// and prepares their claims together.
    async fn prepare_batch(&self) {
        let guard = self.serializer.acquire().await;
        let waiting = self.prepares.take();
        if waiting.is_empty() {
            // An earlier batch took them.
            return;
        }
        let (claims, mut replies) = batch::split(waiting, |c: &Claim| c.claim.uid.as_str());
        let results = match guard {
            Ok(_guard) => tokio::select! {
                results = self.prepare_claims(claims) => Ok(results),
                // Dropped as a cancelled call is.
                () = replies.all_gone() => return,
            },
            Err(status) => Err(status),
        };
        replies.answer(results, |uid| failed(format!("no result for claim {uid}")));
    }

    /// Steps 3 to 6 for `claims`, under the serialization lock: the result
    /// of each.
    async fn prepare_claims(
        &self,
        mut to_prepare: Vec<Claim>,
    ) -> HashMap<String, v1::NodePrepareResourceResponse> {
        let mut results = HashMap::new();
        // 3. Recorded as being prepared; a claim another call prepared in
        //    the meantime is answered from its record.
        let intents: Vec<PreparedClaim> = to_prepare
            .iter()
            .map(|c| PreparedClaim::interrupted(c, self.boot_id.clone()))
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
                        Some(record) if record.prepared_during(boot.as_deref()) => {
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
                    results.insert(claim.claim.uid.into(), failed(error));
                }
                return results;
            }
        };
        to_prepare.retain(|c| match done.get(&c.claim.uid) {
            Some(devices) => {
                results.insert(c.claim.uid.to_string(), prepared(devices));
                false
            }
            None => true,
        });
        if to_prepare.is_empty() {
            return results;
        }
        stop_point(Step::Recorded).await;

        // 4. The driver.
        let asked: HashMap<ClaimUid, (ClaimRef, Option<String>)> = to_prepare
            .iter()
            .map(|c| (c.claim.uid.clone(), (c.claim.clone(), c.pod_claim_name())))
            .collect();
        let mut answers = self.driver.prepare(to_prepare).await;
        stop_point(Step::Answered).await;

        // 5. The CDI spec files (and device metadata) of what it prepared.
        let mut answered = Vec::new();
        for (uid, (claim, pod_claim_name)) in &asked {
            let devices = match answers.remove(uid) {
                Some(Ok(devices)) => devices,
                Some(Err(error)) => {
                    results.insert(uid.to_string(), failed(error.to_string()));
                    continue;
                }
                None => {
                    let error = format!("the driver gave no result for claim {uid}");
                    results.insert(uid.to_string(), failed(error));
                    continue;
                }
            };
            let mut record = PreparedClaim {
                claim: claim.clone(),
                devices,
                state: PreparedState::Prepared,
                boot_id: self.boot_id.clone(),
            };
            if let Some(metadata) = &self.metadata
                && let Err(e) = metadata.write(&mut record, pod_claim_name.as_deref())
            {
                let error = format!("cannot write the device metadata of claim {uid}: {e}");
                results.insert(uid.to_string(), failed(error));
                continue;
            }
            if let Some(cdi) = &self.cdi {
                cdi.assign_ids(&mut record);
                if let Err(e) = cdi.write(&record) {
                    let path = cdi.path(uid.as_str());
                    let error = format!("cannot write the CDI spec {path:?}: {e}");
                    results.insert(uid.to_string(), failed(error));
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
                results.insert(uid.into(), result);
            }
        }
        stop_point(Step::Saved).await;
        results
    }

    /// Unprepares the claims of `request`, each with what is recorded of
    /// it, and forgets those the driver released.
    pub(super) async fn unprepare(
        self: &Arc<Self>,
        request: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, Status> {
        let claims: Vec<ClaimRef> = request.claims.into_iter().map(claim_ref).collect();
        let claims = if matches!(self.serializer, Serializer::None) {
            self.unprepare_claims(claims).await?
        } else {
            let answer = self.unprepares.push(claims);
            let service = self.clone();
            tokio::spawn(async move { service.unprepare_batch().await });
            answer.await.map_err(|_| {
                Status::internal("the batch unpreparing the claims ended without answering")
            })??
        };
        Ok(v1::NodeUnprepareResourcesResponse { claims })
    }

    /// Takes every waiting unprepare once it holds the serialization lock,
    /// and unprepares their claims together.
    async fn unprepare_batch(&self) {
        let guard = self.serializer.acquire().await;
        let waiting = self.unprepares.take();
        if waiting.is_empty() {
            // An earlier batch took them.
            return;
        }
        let (claims, mut replies) = batch::split(waiting, |c: &ClaimRef| c.uid.as_str());
        let results = match guard {
            Ok(_guard) => tokio::select! {
                results = self.unprepare_claims(claims) => results,
                // Dropped as a cancelled call is.
                () = replies.all_gone() => return,
            },
            Err(status) => Err(status),
        };
        replies.answer(results, |uid| v1::NodeUnprepareResourceResponse {
            error: format!("no result for claim {uid}"),
        });
    }

    /// Unprepares `claims` under the serialization lock: the result of
    /// each, or why none could be tried.
    async fn unprepare_claims(
        &self,
        claims: Vec<ClaimRef>,
    ) -> Result<HashMap<String, v1::NodeUnprepareResourceResponse>, Status> {
        let records =
            self.store.read().await.map_err(|e| {
                Status::unavailable(format!("cannot read the prepared claims: {e}"))
            })?;
        let claims: Vec<PreparedClaim> = claims
            .into_iter()
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
        let asked: Vec<ClaimRef> = claims.iter().map(|c| c.claim.clone()).collect();
        let mut answers = self.driver.unprepare(claims).await;
        let mut released = Vec::new();
        let mut results = HashMap::new();
        for claim in asked {
            let uid = claim.uid.clone();
            let error = match answers.remove(&uid) {
                Some(Ok(())) => match self.metadata.as_ref().map(|m| m.remove(&claim)) {
                    Some(Err(e)) => {
                        format!("cannot remove the device metadata of claim {uid}: {e}")
                    }
                    _ => {
                        if let Some(cdi) = &self.cdi
                            && let Err(e) = cdi.remove(uid.as_str())
                        {
                            tracing::warn!(claim = %uid, error = %e, "cannot remove the claim's CDI spec");
                        }
                        released.push(uid.clone());
                        String::new()
                    }
                },
                Some(Err(error)) => error.to_string(),
                None => format!("the driver gave no result for claim {uid}"),
            };
            results.insert(uid.into(), v1::NodeUnprepareResourceResponse { error });
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
                    results.insert(uid.into(), v1::NodeUnprepareResourceResponse { error });
                }
            }
        }
        Ok(results)
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

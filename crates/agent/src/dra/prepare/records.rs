//! The claims prepared on this node, as the claim book keeps them:
//! per claim and driver what it got (devices and CDI ids) and the pods
//! using it. The checkpoint (`checkpoint.rs`) is this model on disk.
//!
//! Every decision about claims is made here, under the claim book's lock
//! (`claim_book.rs`), as the kubelet's DRA manager makes it under its cache
//! lock:
//!
//! - **Before any driver is called** ([`PreparedClaims::begin_prepare`]),
//!   a claim replaced under the same name, a pod recorded under another
//!   name and a claim being unprepared are refused; then each claim is
//!   recorded as used by its pod, as *pending* when the driver has not
//!   prepared it yet, so that a prepare that fails or is interrupted is
//!   still unprepared when the pod goes. Claims prepared before are
//!   answered from their records, without a call.
//! - **When the driver answered** ([`PreparedClaims::finish_prepare`]),
//!   each claim it prepared records its devices.
//! - **Unpreparing a pod** ([`PreparedClaims::begin_unprepare`]): a claim
//!   other pods still use only forgets the pod; one it used last is called
//!   on every driver that recorded it, prepared or pending, and is
//!   forgotten per driver that unprepared it
//!   ([`PreparedClaims::forget`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use crate::dra::claim::{ClaimPod, ClaimRef, PreparedClaim, PreparedDevice};
use crate::dra::error::DraError;
#[cfg(feature = "kube")]
use crate::dra::prepare::pod::{PodClaim, PodClaimResult};

/// What one driver prepared of one claim, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordedClaim {
    /// The driver that prepared it.
    pub driver: String,
    /// The claim.
    pub claim: ClaimRef,
    /// What it got from this driver (empty while pending).
    pub devices: Vec<PreparedDevice>,
    /// When it was recorded, and again when the driver prepared it (Unix
    /// milliseconds).
    pub prepared_at_unix_ms: u64,
    /// Whether the driver prepared it. A claim is recorded before the
    /// driver is called (pending); a pending claim's driver may hold some
    /// of it, so it is unprepared like a prepared one. Checkpoints written
    /// before pending records existed held prepared claims only.
    #[serde(default = "prepared_by_default")]
    pub prepared: bool,
    /// The pods it was prepared for, when they were named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<ClaimPod>,
}

fn prepared_by_default() -> bool {
    true
}

impl RecordedClaim {
    /// Adds `pod` (and its containers) to the pods using the claim; says
    /// whether anything changed. A pod already recorded under another name
    /// keeps it: a rename is refused before anything is recorded.
    fn add_pod(&mut self, pod: &ClaimPod) -> bool {
        let Some(known) = self.pods.iter_mut().find(|p| p.uid == pod.uid) else {
            self.pods.push(pod.clone());
            return true;
        };
        if known.name != pod.name {
            return false;
        }
        known.merge(pod)
    }

    /// Removes pod `uid` from the pods using the claim; says whether it was
    /// there.
    fn remove_pod(&mut self, uid: &str) -> bool {
        let before = self.pods.len();
        self.pods.retain(|p| p.uid != uid);
        self.pods.len() != before
    }

    /// The recorded result, as prepare returns it.
    pub(crate) fn result(&self) -> PreparedClaim {
        PreparedClaim {
            claim: self.claim.clone(),
            devices: self.devices.clone(),
            error: None,
        }
    }
}

/// One claim to prepare: the claim, the drivers that prepare it (those of
/// its allocation results) and the pod using it, if one is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimToPrepare {
    pub(crate) claim: ClaimRef,
    pub(crate) drivers: Vec<String>,
    pub(crate) user: Option<ClaimPod>,
}

/// What a prepare must still do once its claims are recorded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PreparePlan {
    /// Driver → the claims it must be called with, in request order.
    pub(crate) calls: BTreeMap<String, Vec<ClaimRef>>,
    /// (driver, result) of claims prepared before: answered from records.
    pub(crate) recorded: Vec<(String, PreparedClaim)>,
}

/// What unpreparing a pod must still do once the pod is forgotten where
/// other pods still use a claim.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct UnpreparePlan {
    /// Driver → the claims the pod used last, to unprepare.
    pub(crate) calls: BTreeMap<String, Vec<ClaimRef>>,
    /// The claims other pods still use: the pod was only forgotten there.
    pub(crate) shared: Vec<(ClaimRef, Vec<String>)>,
}

/// A record's key: claim UID, then driver, so that a claim's records are
/// next to each other, sorted by driver.
type Key = (String, String);

/// Prepared claims by claim UID and driver.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreparedClaims {
    /// Shared, so copies of the whole set (one per change, for readers)
    /// cost a reference count per record.
    by_key: BTreeMap<Key, Arc<RecordedClaim>>,
    /// Whether the checkpoint was read (or there is none): until then the
    /// claims are not known, not absent.
    loaded: bool,
    /// How many times they changed since the manager started: a reader
    /// that saw one generation knows whether a later copy is as new.
    generation: u64,
}

impl PreparedClaims {
    /// These claims, as what the node has once the checkpoint was read.
    pub(crate) fn loaded(mut self) -> Self {
        self.loaded = true;
        self.generation += 1;
        self
    }

    /// How many times they changed (their loading counts as one).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Counts a change.
    pub(crate) fn changed(&mut self) {
        self.generation += 1;
    }

    /// Whether the checkpoint was read.
    pub(crate) fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// The claims of `records` (a checkpoint's), not yet loaded.
    pub(crate) fn restore(records: Vec<RecordedClaim>) -> Self {
        Self {
            by_key: records
                .into_iter()
                .map(|c| ((c.claim.uid.clone(), c.driver.clone()), Arc::new(c)))
                .collect(),
            loaded: false,
            generation: 0,
        }
    }

    /// The record of what `driver` prepared of claim `uid`.
    #[cfg(test)]
    pub(crate) fn get(&self, driver: &str, uid: &str) -> Option<&RecordedClaim> {
        self.by_key
            .get(&(uid.to_string(), driver.to_string()))
            .map(Arc::as_ref)
    }

    /// The records of claim `uid`, one per driver that prepared it, sorted
    /// by driver.
    pub(crate) fn drivers_of<'a>(
        &'a self,
        uid: &'a str,
    ) -> impl Iterator<Item = &'a RecordedClaim> {
        self.by_key
            .range((uid.to_string(), String::new())..)
            .take_while(move |((u, _), _)| u == uid)
            .map(|(_, c)| c.as_ref())
    }

    /// Checks `claims` as the kubelet does before it records anything,
    /// then records each as used by its pod (a new one as pending), and
    /// says which drivers to call with which claims; the rest are answered
    /// from their records. `unpreparing`: claims whose last pod is being
    /// unprepared, which no pod may start using. Nothing is changed when a
    /// check fails. Returns the plan and whether the records changed.
    pub(crate) fn begin_prepare(
        &mut self,
        claims: &[ClaimToPrepare],
        unpreparing: &HashSet<String>,
        now_ms: u64,
    ) -> Result<(PreparePlan, bool), DraError> {
        for request in claims {
            self.check(request, unpreparing)?;
        }
        let mut plan = PreparePlan::default();
        let mut changed = false;
        for request in claims {
            let claim = &request.claim;
            for driver in &request.drivers {
                let key = (claim.uid.clone(), driver.clone());
                let record = self.by_key.entry(key).or_insert_with(|| {
                    changed = true;
                    Arc::new(RecordedClaim {
                        driver: driver.clone(),
                        claim: claim.clone(),
                        devices: Vec::new(),
                        prepared_at_unix_ms: now_ms,
                        prepared: false,
                        pods: Vec::new(),
                    })
                });
                if let Some(user) = &request.user
                    && !knows(record, user)
                {
                    changed |= Arc::make_mut(record).add_pod(user);
                }
                if record.prepared {
                    plan.recorded.push((driver.clone(), record.result()));
                } else {
                    plan.calls
                        .entry(driver.clone())
                        .or_default()
                        .push(claim.clone());
                }
            }
        }
        Ok((plan, changed))
    }

    /// The kubelet's checks of one claim before it is recorded: not
    /// replaced by another of the same name while the old one is recorded,
    /// not being unprepared, and its pod not recorded under another name.
    fn check(
        &self,
        request: &ClaimToPrepare,
        unpreparing: &HashSet<String>,
    ) -> Result<(), DraError> {
        let claim = &request.claim;
        if let Some(old) = self.by_name(&claim.namespace, &claim.name)
            && old.claim.uid != claim.uid
        {
            return Err(DraError::ClaimReplaced {
                claim: format!("{}/{}", claim.namespace, claim.name),
                prepared_uid: old.claim.uid.clone(),
                uid: claim.uid.clone(),
            });
        }
        if unpreparing.contains(&claim.uid) {
            // The kubelet names the claim alone here.
            return Err(DraError::ClaimUnpreparing {
                claim: claim.name.clone(),
            });
        }
        if let Some(user) = &request.user
            && let Some(known) = self.recorded_name(&user.uid)
            && known != (claim.namespace.as_str(), user.name.as_str())
        {
            return Err(DraError::PodRenamed {
                pod: user.uid.clone(),
                known: format!("{}/{}", known.0, known.1),
                given: format!("{}/{}", claim.namespace, user.name),
            });
        }
        Ok(())
    }

    /// Records what `driver` prepared: each claim of `results` without an
    /// error gets its devices and counts as prepared. A claim whose record
    /// is gone meanwhile (unprepared by hand) is left out. Says whether
    /// anything changed.
    pub(crate) fn finish_prepare(
        &mut self,
        driver: &str,
        results: &[PreparedClaim],
        now_ms: u64,
    ) -> bool {
        let mut changed = false;
        for result in results.iter().filter(|r| r.error.is_none()) {
            let key = (result.claim.uid.clone(), driver.to_string());
            let Some(record) = self.by_key.get_mut(&key) else {
                tracing::warn!(claim = %result.claim, %driver,
                    "a claim was unprepared while its prepare ran; its new devices are not recorded");
                continue;
            };
            if record.prepared && record.devices == result.devices {
                continue;
            }
            let record = Arc::make_mut(record);
            record.devices = result.devices.clone();
            record.prepared = true;
            record.prepared_at_unix_ms = now_ms;
            changed = true;
        }
        changed
    }

    /// Unpreparing pod `uid`: forgets it where other pods still use a
    /// claim, and says which drivers to call with the claims it used last
    /// (each claim once per driver that recorded it, prepared or pending).
    /// Those are not forgotten until their drivers unprepared them. Returns
    /// the plan and whether the records changed.
    pub(crate) fn begin_unprepare(&mut self, uid: &str) -> (UnpreparePlan, bool) {
        let mut plan = UnpreparePlan::default();
        let mut changed = false;
        let claims: BTreeSet<String> = self
            .used_by(uid)
            .map(|record| record.claim.uid.clone())
            .collect();
        for claim_uid in claims {
            let records: Vec<Key> = self
                .drivers_of(&claim_uid)
                .map(|r| (r.claim.uid.clone(), r.driver.clone()))
                .collect();
            let shared = self
                .drivers_of(&claim_uid)
                .any(|r| r.pods.iter().any(|p| p.uid != uid));
            let mut drivers = Vec::new();
            let mut claim = None;
            for key in records {
                let Some(record) = self.by_key.get_mut(&key) else {
                    continue;
                };
                claim.get_or_insert_with(|| record.claim.clone());
                drivers.push(key.1.clone());
                if shared {
                    if record.pods.iter().any(|p| p.uid == uid) {
                        changed |= Arc::make_mut(record).remove_pod(uid);
                    }
                } else {
                    plan.calls
                        .entry(key.1)
                        .or_default()
                        .push(record.claim.clone());
                }
            }
            if shared && let Some(claim) = claim {
                plan.shared.push((claim, drivers));
            }
        }
        (plan, changed)
    }

    /// A prepared claim named `namespace/name`, of any UID.
    /// After the node rebooted: the claims pod `pod_uid` uses (every
    /// claim, with `None`) count as not prepared, so that the next prepare
    /// calls their drivers again (what a driver set up for a claim, such
    /// as its CDI spec on a tmpfs or a device's configuration, may be gone
    /// with the boot); they stay recorded for their pods, so they are still
    /// unprepared when the pods go. Says whether anything changed.
    pub(crate) fn prepare_again(&mut self, pod_uid: Option<&str>) -> bool {
        let mut changed = false;
        for record in self.by_key.values_mut() {
            let used = pod_uid.is_none_or(|uid| record.pods.iter().any(|p| p.uid == uid));
            if used && record.prepared {
                let record = Arc::make_mut(record);
                record.prepared = false;
                record.devices.clear();
                changed = true;
            }
        }
        changed
    }

    /// Whether the claims `names` (of namespace `namespace`) are prepared
    /// for pod `pod_uid` already: when every one is recorded prepared by
    /// every driver that recorded it, with the pod among its users, the
    /// claims (in `names` order) and their results (claim, then driver);
    /// `None` otherwise. The one answer to that question: an admission
    /// answered here needs neither the API nor a driver.
    #[cfg(feature = "kube")]
    pub(crate) fn prepared_for_pod(
        &self,
        namespace: &str,
        pod_uid: &str,
        names: &[String],
    ) -> Option<(Vec<PodClaim>, Vec<PodClaimResult>)> {
        let mut claims = Vec::new();
        let mut results = Vec::new();
        for name in names {
            let first = self.by_name(namespace, name)?;
            let uid = first.claim.uid.clone();
            let mut drivers = Vec::new();
            let mut user = None;
            for record in self.drivers_of(&uid) {
                let mine = record.pods.iter().find(|p| p.uid == pod_uid);
                let (true, Some(mine)) = (record.prepared, mine) else {
                    return None;
                };
                user.get_or_insert_with(|| mine.clone());
                drivers.push(record.driver.clone());
                results.push(PodClaimResult {
                    driver: record.driver.clone(),
                    result: record.result(),
                });
            }
            claims.push(PodClaim {
                claim: first.claim.clone(),
                drivers,
                user: user?,
            });
        }
        Some((claims, results))
    }

    pub(crate) fn by_name(&self, namespace: &str, name: &str) -> Option<&RecordedClaim> {
        self.by_key
            .values()
            .map(Arc::as_ref)
            .find(|c| c.claim.namespace == namespace && c.claim.name == name)
    }

    /// The `(namespace, name)` pod `uid` is recorded under, if any claim
    /// records it.
    fn recorded_name(&self, uid: &str) -> Option<(&str, &str)> {
        self.by_key.values().find_map(|c| {
            let known = c.pods.iter().find(|p| p.uid == uid)?;
            Some((c.claim.namespace.as_str(), known.name.as_str()))
        })
    }

    /// The records that pod `uid` uses, sorted by claim UID, then driver.
    pub(crate) fn used_by<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a RecordedClaim> {
        self.by_key
            .values()
            .map(Arc::as_ref)
            .filter(move |c| c.pods.iter().any(|p| p.uid == uid))
    }

    /// The UIDs of the pods named `namespace/name` that the records name
    /// (more than one when a pod was made again under its name), sorted.
    pub(crate) fn pod_uids_named(&self, namespace: &str, name: &str) -> BTreeSet<&str> {
        self.by_key
            .values()
            .filter(|c| c.claim.namespace == namespace)
            .flat_map(|c| c.pods.iter().filter(|p| p.name == name))
            .map(|p| p.uid.as_str())
            .collect()
    }

    /// Forgets what `driver` prepared of the claims `uids` (what other
    /// drivers prepared of them stays); says whether anything changed.
    pub(crate) fn forget<'a>(
        &mut self,
        driver: &str,
        uids: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        let mut changed = false;
        for uid in uids {
            changed |= self
                .by_key
                .remove(&(uid.to_string(), driver.to_string()))
                .is_some();
        }
        changed
    }

    /// Every record, sorted by claim UID, then driver.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<RecordedClaim>> {
        self.by_key.values()
    }

    /// Every record, sorted by claim UID, then driver.
    pub(crate) fn list(&self) -> Vec<RecordedClaim> {
        self.by_key
            .values()
            .map(|c| RecordedClaim::clone(c))
            .collect()
    }
}

/// Whether `record` names `pod` with all its containers (and their
/// requests) already.
fn knows(record: &RecordedClaim, pod: &ClaimPod) -> bool {
    record
        .pods
        .iter()
        .any(|p| p.uid == pod.uid && p.name == pod.name && !p.clone().merge(pod))
}

#[cfg(test)]
mod tests;

/// The prepared claims are the running manager's once its checkpoint was
/// read.
impl crate::published::Ready for PreparedClaims {
    fn ready(&self) -> bool {
        self.is_loaded()
    }
}

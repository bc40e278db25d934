//! The claims prepared on this node: what each driver prepared of each
//! claim (devices and CDI ids), kept across agent restarts in a checkpoint
//! written like the device checkpoint ([`crate::checkpoint`]).
//!
//! A claim whose devices come from several drivers is prepared by each of
//! them, and each keeps its own record, as upstream keeps per-claim state
//! per driver in `dra_manager_state`. A claim prepared again by a driver
//! returns what that driver gave without calling it a second time, until it
//! is unprepared; unprepare by claim UID alone goes to every driver that
//! prepared it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::claim::{ClaimPod, ClaimRef, PreparedClaim, PreparedDevice};
use crate::checkpoint::{CheckpointFile, CheckpointProblem};

/// The checkpoint's file name in the agent's state directory.
pub const CHECKPOINT_FILE: &str = "nodeplugins_dra_checkpoint";
/// The backup's file name: the same bytes, written right after the checkpoint.
pub const BACKUP_FILE: &str = "nodeplugins_dra_checkpoint.backup";

/// What one driver prepared of one claim, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordedClaim {
    /// The driver that prepared it.
    pub driver: String,
    /// The claim.
    pub claim: ClaimRef,
    /// What it got from this driver.
    pub devices: Vec<PreparedDevice>,
    /// When it was prepared (Unix milliseconds).
    pub prepared_at_unix_ms: u64,
    /// The pods it was prepared for, when they were named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<ClaimPod>,
}

impl RecordedClaim {
    /// Whether `pod` uses the claim from all its containers (with their
    /// requests) already.
    pub(crate) fn uses(&self, pod: &ClaimPod) -> bool {
        self.pods
            .iter()
            .any(|p| p.uid == pod.uid && p.name == pod.name && !p.clone().merge(pod))
    }

    /// Adds `pod` (and its containers) to the pods using the claim; says
    /// whether anything changed. A pod already recorded under another name
    /// keeps it: a rename is refused before the driver is called
    /// ([`PreparedClaims::pod_name_conflict`]).
    pub(crate) fn add_pod(&mut self, pod: &ClaimPod) -> bool {
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
    pub(crate) fn remove_pod(&mut self, uid: &str) -> bool {
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

/// What the DRA checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraCheckpoint {
    /// Every prepared claim, once per driver that prepared it.
    pub claims: Vec<RecordedClaim>,
}

/// The DRA checkpoint and its backup in the state directory `dir`.
pub(crate) fn file(dir: &Path) -> CheckpointFile {
    CheckpointFile::new(
        "DRA claims checkpoint",
        dir.join(CHECKPOINT_FILE),
        dir.join(BACKUP_FILE),
    )
}

/// The prepared claims checkpointed in `dir`, and what was wrong with the
/// checkpoint if anything was.
pub(crate) async fn load(dir: &Path) -> (PreparedClaims, Option<CheckpointProblem>) {
    if let Err(e) = crate::private_dir::create_private_dir(dir) {
        tracing::error!(dir = %dir.display(), error = %e, "cannot create the DRA state directory");
    }
    let file = file(dir);
    match tokio::task::spawn_blocking(move || file.load::<DraCheckpoint>()).await {
        Ok(Ok(loaded)) => {
            let problem = loaded.recovered.map(|recovered| {
                tracing::warn!("{recovered}");
                CheckpointProblem::Recovered(Arc::new(recovered))
            });
            let claims = PreparedClaims::restore(loaded.data);
            tracing::info!(
                claims = claims.list().len(),
                "DRA claims checkpoint restored"
            );
            (claims, problem)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "DRA claims checkpoint not restored");
            (
                PreparedClaims::default(),
                Some(CheckpointProblem::Unreadable(Arc::new(e))),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "DRA claims checkpoint not restored");
            (PreparedClaims::default(), None)
        }
    }
}

/// Claim UID → the pod a prepare names as using that claim.
pub(crate) type ClaimPods = BTreeMap<String, ClaimPod>;

/// A record's key: claim UID, then driver, so that a claim's records are
/// next to each other, sorted by driver.
type Key = (String, String);

/// The `namespace/name` a pod UID is recorded under, and the one a prepare
/// gives it, when they differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodNameConflict {
    /// `namespace/name` recorded.
    pub(crate) known: String,
    /// `namespace/name` given.
    pub(crate) given: String,
}

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

    /// The claims a checkpoint held. Each record names its driver, so a
    /// checkpoint written when a claim had one record loads as it was.
    pub(crate) fn restore(checkpoint: DraCheckpoint) -> Self {
        Self {
            by_key: checkpoint
                .claims
                .into_iter()
                .map(|c| ((c.claim.uid.clone(), c.driver.clone()), Arc::new(c)))
                .collect(),
            loaded: false,
            generation: 0,
        }
    }

    /// The record of what `driver` prepared of claim `uid`.
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

    /// Whether `pod`, using claims in `namespace`, is recorded for another
    /// claim under another namespace or name.
    pub(crate) fn pod_name_conflict(
        &self,
        pod: &ClaimPod,
        namespace: &str,
    ) -> Option<PodNameConflict> {
        self.by_key.values().find_map(|c| {
            let known = c.pods.iter().find(|p| p.uid == pod.uid)?;
            (known.name != pod.name || c.claim.namespace != namespace).then(|| PodNameConflict {
                known: format!("{}/{}", c.claim.namespace, known.name),
                given: format!("{namespace}/{}", pod.name),
            })
        })
    }

    /// Records the claims of `results` that `driver` prepared, each used by
    /// its pod in `pods` if it has one; says whether anything changed.
    pub(crate) fn record(
        &mut self,
        driver: &str,
        results: &[PreparedClaim],
        pods: &ClaimPods,
        now_ms: u64,
    ) -> bool {
        let mut changed = false;
        for result in results.iter().filter(|r| r.error.is_none()) {
            let key = (result.claim.uid.clone(), driver.to_string());
            let same = self
                .by_key
                .get(&key)
                .is_some_and(|c| c.devices == result.devices);
            if !same {
                let pods = self
                    .by_key
                    .remove(&key)
                    .map(|c| Arc::unwrap_or_clone(c).pods)
                    .unwrap_or_default();
                let record = RecordedClaim {
                    driver: driver.to_string(),
                    claim: result.claim.clone(),
                    devices: result.devices.clone(),
                    prepared_at_unix_ms: now_ms,
                    pods,
                };
                self.by_key.insert(key.clone(), Arc::new(record));
                changed = true;
            }
            let Some(pod) = pods.get(&result.claim.uid) else {
                continue;
            };
            if let Some(conflict) = self.pod_name_conflict(pod, &result.claim.namespace) {
                // Two prepares naming the pod differently raced past the
                // check before the call; the first one recorded stands.
                tracing::warn!(pod = %pod.uid, known = %conflict.known, given = %conflict.given,
                    claim = %result.claim, "pod not recorded under a second name");
                continue;
            }
            if let Some(record) = self.by_key.get_mut(&key)
                && !record.uses(pod)
            {
                changed |= Arc::make_mut(record).add_pod(pod);
            }
        }
        changed
    }

    /// Whether every claim of `pods` that `driver` prepared already names
    /// its pod with all its containers.
    pub(crate) fn knows_pods(&self, driver: &str, pods: &ClaimPods) -> bool {
        pods.iter()
            .all(|(uid, pod)| self.get(driver, uid).is_some_and(|c| c.uses(pod)))
    }

    /// A prepared claim named `namespace/name`, of any UID.
    pub(crate) fn by_name(&self, namespace: &str, name: &str) -> Option<&RecordedClaim> {
        self.by_key
            .values()
            .map(Arc::as_ref)
            .find(|c| c.claim.namespace == namespace && c.claim.name == name)
    }

    /// The records that pod `uid` uses, sorted by claim UID, then driver.
    pub(crate) fn used_by<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a RecordedClaim> {
        self.by_key
            .values()
            .map(Arc::as_ref)
            .filter(move |c| c.pods.iter().any(|p| p.uid == uid))
    }

    /// The UID of the pod `namespace/name` that prepared claims record, if
    /// any does.
    pub(crate) fn pod_uid(&self, namespace: &str, name: &str) -> Option<&str> {
        self.by_key
            .values()
            .filter(|c| c.claim.namespace == namespace)
            .find_map(|c| c.pods.iter().find(|p| p.name == name))
            .map(|p| p.uid.as_str())
    }

    /// Removes pod `uid` from the pods using the claims `claim_uids` (as
    /// recorded by every driver); says whether anything changed.
    pub(crate) fn remove_pod<'a>(
        &mut self,
        uid: &str,
        claim_uids: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        let mut changed = false;
        for claim_uid in claim_uids {
            let keys: Vec<Key> = self
                .by_key
                .range((claim_uid.to_string(), String::new())..)
                .take_while(|((u, _), _)| u == claim_uid)
                .map(|(key, _)| key.clone())
                .collect();
            for key in keys {
                if let Some(record) = self.by_key.get_mut(&key)
                    && record.pods.iter().any(|p| p.uid == uid)
                {
                    changed |= Arc::make_mut(record).remove_pod(uid);
                }
            }
        }
        changed
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

    /// What the checkpoint records.
    pub(crate) fn checkpoint(&self) -> DraCheckpoint {
        DraCheckpoint {
            claims: self.list(),
        }
    }
}

#[cfg(test)]
mod tests;

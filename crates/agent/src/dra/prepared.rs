//! The claims prepared on this node: what each got (devices and CDI ids)
//! and from which driver, kept across agent restarts in a checkpoint written
//! like the device checkpoint ([`crate::checkpoint`]).
//!
//! A claim prepared again returns what it got without calling the driver a
//! second time, until it is unprepared; unprepare finds the driver that
//! prepared a claim from its UID alone. Upstream keeps the same facts in
//! `dra_manager_state`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::claim::{ClaimPod, ClaimRef, PreparedClaim, PreparedDevice};
use crate::checkpoint::CheckpointFile;

/// The checkpoint's file name in the agent's state directory.
pub const CHECKPOINT_FILE: &str = "nodeplugins_dra_checkpoint";
/// The backup's file name: the same bytes, written right after the checkpoint.
pub const BACKUP_FILE: &str = "nodeplugins_dra_checkpoint.backup";

/// One prepared claim, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordedClaim {
    /// The driver that prepared it.
    pub driver: String,
    /// The claim.
    pub claim: ClaimRef,
    /// What it got.
    pub devices: Vec<PreparedDevice>,
    /// When it was prepared (Unix milliseconds).
    pub prepared_at_unix_ms: u64,
    /// The pods it was prepared for, when they were named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<ClaimPod>,
}

impl RecordedClaim {
    /// Whether `pod` uses the claim from all its containers already.
    pub(crate) fn uses(&self, pod: &ClaimPod) -> bool {
        self.pods.iter().any(|p| {
            p.uid == pod.uid
                && p.name == pod.name
                && pod.containers.iter().all(|n| p.containers.contains(n))
        })
    }

    /// Adds `pod` (and its containers) to the pods using the claim; says
    /// whether anything changed.
    pub(crate) fn add_pod(&mut self, pod: &ClaimPod) -> bool {
        let Some(known) = self.pods.iter_mut().find(|p| p.uid == pod.uid) else {
            self.pods.push(pod.clone());
            return true;
        };
        let mut changed = false;
        if known.name != pod.name {
            known.name.clone_from(&pod.name);
            changed = true;
        }
        for container in &pod.containers {
            if !known.containers.contains(container) {
                known.containers.push(container.clone());
                changed = true;
            }
        }
        changed
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
    /// Every prepared claim.
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

/// Prepared claims by UID.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreparedClaims {
    /// Shared, so copies of the whole set (one per change, for readers)
    /// cost a reference count per claim.
    by_uid: BTreeMap<String, Arc<RecordedClaim>>,
    /// Whether the checkpoint was read (or there is none): until then the
    /// claims are not known, not absent.
    loaded: bool,
}

impl PreparedClaims {
    /// These claims, as what the node has once the checkpoint was read.
    pub(crate) fn loaded(mut self) -> Self {
        self.loaded = true;
        self
    }

    /// Whether the checkpoint was read.
    pub(crate) fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// The claims a checkpoint held.
    pub(crate) fn restore(checkpoint: DraCheckpoint) -> Self {
        Self {
            by_uid: checkpoint
                .claims
                .into_iter()
                .map(|c| (c.claim.uid.clone(), Arc::new(c)))
                .collect(),
            loaded: false,
        }
    }

    /// The record of `uid` if `driver` prepared it.
    pub(crate) fn get(&self, driver: &str, uid: &str) -> Option<&RecordedClaim> {
        self.by_uid
            .get(uid)
            .map(Arc::as_ref)
            .filter(|c| c.driver == driver)
    }

    /// The record of `uid`, whichever driver prepared it.
    pub(crate) fn find(&self, uid: &str) -> Option<&RecordedClaim> {
        self.by_uid.get(uid).map(Arc::as_ref)
    }

    /// Records the claims of `results` that `driver` prepared, used by
    /// `pod` if given; says whether anything changed.
    pub(crate) fn record(
        &mut self,
        driver: &str,
        results: &[PreparedClaim],
        pod: Option<&ClaimPod>,
        now_ms: u64,
    ) -> bool {
        let mut changed = false;
        for result in results.iter().filter(|r| r.error.is_none()) {
            let uid = &result.claim.uid;
            let same = self
                .by_uid
                .get(uid)
                .is_some_and(|c| c.driver == driver && c.devices == result.devices);
            if !same {
                let pods = self
                    .by_uid
                    .remove(uid)
                    .map(|c| Arc::unwrap_or_clone(c).pods)
                    .unwrap_or_default();
                let record = RecordedClaim {
                    driver: driver.to_string(),
                    claim: result.claim.clone(),
                    devices: result.devices.clone(),
                    prepared_at_unix_ms: now_ms,
                    pods,
                };
                self.by_uid.insert(uid.clone(), Arc::new(record));
                changed = true;
            }
            if let (Some(pod), Some(record)) = (pod, self.by_uid.get_mut(uid))
                && !record.uses(pod)
            {
                changed |= Arc::make_mut(record).add_pod(pod);
            }
        }
        changed
    }

    /// Whether every claim of `uids` that `driver` prepared already names
    /// `pod` with all its containers.
    pub(crate) fn knows_pod<'a>(
        &self,
        driver: &str,
        mut uids: impl Iterator<Item = &'a str>,
        pod: &ClaimPod,
    ) -> bool {
        uids.all(|uid| self.get(driver, uid).is_some_and(|c| c.uses(pod)))
    }

    /// Forgets the claims `uids`; says whether anything changed.
    pub(crate) fn forget<'a>(&mut self, uids: impl IntoIterator<Item = &'a str>) -> bool {
        let mut changed = false;
        for uid in uids {
            changed |= self.by_uid.remove(uid).is_some();
        }
        changed
    }

    /// Every record, sorted by claim UID.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<RecordedClaim>> {
        self.by_uid.values()
    }

    /// Every record, sorted by claim UID.
    pub(crate) fn list(&self) -> Vec<RecordedClaim> {
        self.by_uid
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
mod tests {
    use super::*;

    fn prepared(uid: &str, device: &str, error: Option<&str>) -> PreparedClaim {
        PreparedClaim {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: format!("claim-{uid}"),
                uid: uid.into(),
            },
            devices: vec![PreparedDevice {
                request_names: vec!["req".into()],
                pool: "pool".into(),
                device: device.into(),
                cdi_device_ids: vec![format!("example.com/gpu={device}")],
                share_id: None,
            }],
            error: error.map(Into::into),
        }
    }

    #[test]
    fn only_successes_are_recorded_per_driver_and_unprepare_forgets() {
        let mut claims = PreparedClaims::default();
        let results = [
            prepared("a", "gpu-0", None),
            prepared("b", "gpu-1", Some("no")),
        ];
        assert!(claims.record("gpu.example.com", &results, None, 1));
        assert!(
            !claims.record("gpu.example.com", &results[..1], None, 2),
            "nothing new"
        );
        assert_eq!(
            claims.get("gpu.example.com", "a").unwrap().devices[0].device,
            "gpu-0"
        );
        assert!(
            claims.get("gpu.example.com", "b").is_none(),
            "a failure is not recorded"
        );
        assert!(
            claims.get("other.example.com", "a").is_none(),
            "another driver's claim"
        );
        assert_eq!(claims.find("a").unwrap().driver, "gpu.example.com");

        let restored = PreparedClaims::restore(claims.checkpoint());
        assert_eq!(restored.list(), claims.list());
        assert!(claims.forget(["a", "never"]));
        assert!(claims.list().is_empty());
        assert!(!claims.forget(["a"]));
    }

    #[test]
    fn pods_are_added_to_a_claim_once_with_their_containers() {
        let mut claims = PreparedClaims::default();
        let results = [prepared("a", "gpu-0", None)];
        let pod = |containers: &[&str]| ClaimPod {
            uid: "pod-1".into(),
            name: "train".into(),
            containers: containers.iter().map(|c| c.to_string()).collect(),
        };
        assert!(claims.record("gpu.example.com", &results, Some(&pod(&["main"])), 1));
        assert!(claims.knows_pod("gpu.example.com", ["a"].into_iter(), &pod(&["main"])));
        assert!(!claims.knows_pod("gpu.example.com", ["a"].into_iter(), &pod(&["side"])));
        assert!(!claims.record("gpu.example.com", &results, Some(&pod(&["main"])), 2));
        assert!(claims.record("gpu.example.com", &results, Some(&pod(&["side"])), 3));
        let record = claims.find("a").unwrap();
        assert_eq!(record.pods, vec![pod(&["main", "side"])]);
        assert_eq!(record.prepared_at_unix_ms, 1, "prepared once");
        let restored = PreparedClaims::restore(claims.checkpoint());
        assert_eq!(restored.list(), claims.list());
        assert!(claims.forget(["a"]));
        assert!(claims.list().is_empty());
        assert!(!claims.forget(["a"]));
    }
}

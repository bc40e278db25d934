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

use super::claim::{ClaimRef, PreparedClaim, PreparedDevice};
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
}

impl RecordedClaim {
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
    by_uid: BTreeMap<String, RecordedClaim>,
}

impl PreparedClaims {
    /// The claims a checkpoint held.
    pub(crate) fn restore(checkpoint: DraCheckpoint) -> Self {
        Self {
            by_uid: checkpoint
                .claims
                .into_iter()
                .map(|c| (c.claim.uid.clone(), c))
                .collect(),
        }
    }

    /// The record of `uid` if `driver` prepared it.
    pub(crate) fn get(&self, driver: &str, uid: &str) -> Option<&RecordedClaim> {
        self.by_uid.get(uid).filter(|c| c.driver == driver)
    }

    /// The record of `uid`, whichever driver prepared it.
    pub(crate) fn find(&self, uid: &str) -> Option<&RecordedClaim> {
        self.by_uid.get(uid)
    }

    /// Records the claims of `results` that `driver` prepared; says whether
    /// anything changed.
    pub(crate) fn record(&mut self, driver: &str, results: &[PreparedClaim], now_ms: u64) -> bool {
        let mut changed = false;
        for result in results.iter().filter(|r| r.error.is_none()) {
            let record = RecordedClaim {
                driver: driver.to_string(),
                claim: result.claim.clone(),
                devices: result.devices.clone(),
                prepared_at_unix_ms: now_ms,
            };
            let same = self
                .by_uid
                .get(&result.claim.uid)
                .is_some_and(|c| c.driver == record.driver && c.devices == record.devices);
            if !same {
                self.by_uid.insert(result.claim.uid.clone(), record);
                changed = true;
            }
        }
        changed
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
    pub(crate) fn list(&self) -> Vec<RecordedClaim> {
        self.by_uid.values().cloned().collect()
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
        assert!(claims.record("gpu.example.com", &results, 1));
        assert!(
            !claims.record("gpu.example.com", &results[..1], 2),
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
}

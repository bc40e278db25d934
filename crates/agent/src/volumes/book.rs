//! What the volume manager has set up, by pod: each volume's kind, where
//! it is and its state, as `nodeplugins pods POD` shows it. Rebuilt from
//! disk, not kept: a pod's volumes are found again under its directory.

use std::collections::BTreeMap;

use crate::pods::VolumeStatus;

/// The volumes of each pod, by UID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Book {
    pods: BTreeMap<String, Vec<VolumeStatus>>,
}

impl Book {
    /// Records pod `uid`'s volumes as set up now.
    pub(crate) fn set(&mut self, uid: &str, volumes: Vec<VolumeStatus>) {
        self.pods.insert(uid.to_string(), volumes);
    }

    /// Forgets pod `uid`.
    pub(crate) fn remove(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    /// Pod `uid`'s volumes.
    pub(crate) fn of(&self, uid: &str) -> Vec<VolumeStatus> {
        self.pods.get(uid).cloned().unwrap_or_default()
    }
}

//! What the volume manager has set up, by pod: each volume's kind, where
//! it is and its state, as `nodeplugins pods POD` shows it. Rebuilt from
//! disk, not kept: a pod's volumes are found again under its directory.

use std::collections::BTreeMap;

/// A volume's state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum VolumeState {
    /// Set up and mounted into the containers that use it.
    Mounted,
    /// Not set up: why.
    Failed(String),
}

/// One volume of a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRecord {
    /// Its name in the pod.
    pub name: String,
    /// Its kind, as the pod's spec names it (`projected`, `emptyDir`).
    pub kind: String,
    /// Where it is on the host.
    pub path: String,
    /// Its state.
    pub state: VolumeState,
}

/// The volumes of each pod, by UID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Book {
    pods: BTreeMap<String, Vec<VolumeRecord>>,
}

impl Book {
    /// Records pod `uid`'s volumes as set up now.
    pub(crate) fn set(&mut self, uid: &str, volumes: Vec<VolumeRecord>) {
        self.pods.insert(uid.to_string(), volumes);
    }

    /// Forgets pod `uid`.
    pub(crate) fn remove(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    /// Pod `uid`'s volumes.
    pub(crate) fn of(&self, uid: &str) -> Vec<VolumeRecord> {
        self.pods.get(uid).cloned().unwrap_or_default()
    }
}

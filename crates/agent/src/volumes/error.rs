//! Why a pod's volumes could not be set up or torn down, in the kubelet's
//! words: each volume's `MountVolume.SetUp failed for volume "<name>" :
//! <why>` (a `FailedMount` Event), and the pod's `Unable to attach or mount
//! volumes: unmounted volumes=[...]` once it waited the kubelet's 2m3s.

use nodeplugins_api::retry::{Classify, RetryClass};

/// The kubelet's Event reason of a volume that cannot be set up.
pub const FAILED_MOUNT: &str = "FailedMount";

/// One volume's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFailure {
    /// The volume's name in the pod.
    pub volume: String,
    /// Why, in the kubelet's words: of a set-up, the whole sentence of its
    /// Event (`MountVolume.SetUp failed for volume "cfg" : ...`); of a
    /// tear-down, the reason.
    pub error: String,
}

/// Why one volume is not set up, before it is put in the kubelet's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetUpError {
    /// Its SetUp failed for this reason: the kubelet says `MountVolume.SetUp
    /// failed for volume "<its spec's name>" : <reason>`.
    SetUp(String),
    /// A step before its SetUp failed (the node affinity or mount option
    /// check, the attach wait, the stage, the expansion at mount), said
    /// whole as the kubelet says it (`MountVolume.MountDevice failed for
    /// volume "pv" : ...`).
    Said(String),
}

impl SetUpError {
    /// The kubelet's sentence, `spec` the name its volume spec has (the
    /// PersistentVolume's for a claim, the pod's volume's otherwise).
    pub(crate) fn said(self, spec: &str) -> String {
        match self {
            Self::SetUp(reason) => {
                format!("MountVolume.SetUp failed for volume {spec:?} : {reason}")
            }
            Self::Said(sentence) => sentence,
        }
    }

    /// A failure of step `step` (`MountVolume.NodeAffinity check`) of
    /// volume spec `spec`.
    pub(crate) fn of_step(step: &str, spec: &str, reason: impl std::fmt::Display) -> Self {
        Self::Said(format!("{step} failed for volume {spec:?} : {reason}"))
    }

    /// Said for spec `spec` now, when the spec's name is not the pod's
    /// volume's.
    pub(crate) fn for_spec(self, spec: &str) -> Self {
        Self::Said(self.said(spec))
    }
}

impl From<String> for SetUpError {
    fn from(reason: String) -> Self {
        Self::SetUp(reason)
    }
}

impl std::fmt::Display for SetUpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (Self::SetUp(text) | Self::Said(text)) = self;
        f.write_str(text)
    }
}

/// Why a pod's volumes are not all set up (or not all torn down).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// Volumes could not be set up: each with its reason.
    #[error("{}", setup_message(.0))]
    SetUp(Vec<VolumeFailure>),
    /// Volumes could not be torn down: the pod keeps its directory.
    #[error("{}", teardown_message(.0))]
    TearDown(Vec<VolumeFailure>),
}

fn setup_message(failures: &[VolumeFailure]) -> String {
    failures
        .iter()
        .map(|f| f.error.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

fn teardown_message(failures: &[VolumeFailure]) -> String {
    failures
        .iter()
        .map(|f| {
            format!(
                "UnmountVolume.TearDown failed for volume \"{}\" : {}",
                f.volume, f.error
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl VolumeError {
    /// The volumes that failed, by name.
    pub fn volumes(&self) -> Vec<&str> {
        let (Self::SetUp(f) | Self::TearDown(f)) = self;
        f.iter().map(|f| f.volume.as_str()).collect()
    }

    /// The kubelet's message once a pod waited out its mount time.
    pub fn unable_to_mount(&self) -> String {
        let names = self.volumes().join(" ");
        format!(
            "Unable to attach or mount volumes: unmounted volumes=[{names}], unattached volumes=[{names}], failed to process volumes=[]: timed out waiting for the condition"
        )
    }
}

/// Retried on the kubelet's operation backoff.
impl Classify for VolumeError {
    fn class(&self) -> RetryClass {
        RetryClass::Backoff
    }
}

/// A warning about one of a pod's volumes, for an Event on the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    /// The kubelet's reason (`VolumeResizeFailed`, `CertificateExpired`).
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_the_kubelets() {
        let e = VolumeError::SetUp(vec![VolumeFailure {
            volume: "cfg".into(),
            error: SetUpError::from("configmap \"missing\" not found".to_string()).said("cfg"),
        }]);
        assert_eq!(
            e.to_string(),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"missing\" not found"
        );
        assert_eq!(
            e.unable_to_mount(),
            "Unable to attach or mount volumes: unmounted volumes=[cfg], unattached volumes=[cfg], failed to process volumes=[]: timed out waiting for the condition"
        );
    }

    #[test]
    fn a_step_before_set_up_is_said_as_its_own_and_a_claims_volume_by_its_spec() {
        let stage = SetUpError::of_step("MountVolume.MountDevice", "pv-1", "rpc error");
        assert_eq!(
            stage.clone().said("data"),
            "MountVolume.MountDevice failed for volume \"pv-1\" : rpc error"
        );
        assert_eq!(stage.clone().for_spec("pv-2"), stage);
        assert_eq!(
            SetUpError::from("not a directory".to_string())
                .for_spec("pv-1")
                .said("data"),
            "MountVolume.SetUp failed for volume \"pv-1\" : not a directory"
        );
    }
}

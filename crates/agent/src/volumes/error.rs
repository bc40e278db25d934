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
    /// Why.
    pub error: String,
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
        .map(|f| {
            format!(
                "MountVolume.SetUp failed for volume \"{}\" : {}",
                f.volume, f.error
            )
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_the_kubelets() {
        let e = VolumeError::SetUp(vec![VolumeFailure {
            volume: "cfg".into(),
            error: "configmap \"missing\" not found".into(),
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
}

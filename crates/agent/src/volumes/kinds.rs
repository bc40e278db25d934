//! The volume kinds' own ways: an emptyDir, a hostPath, a local
//! PersistentVolume's directory, a tmpfs, and the pod's fsGroup over a
//! volume.

pub(super) mod empty_dir;
pub(super) mod host_path;
pub(crate) mod local;
pub(crate) mod ownership;
pub(crate) mod tmpfs;

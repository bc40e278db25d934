//! What the device manager keeps across restarts: every container's
//! allocation and, per resource, the devices that were healthy. It is
//! written like every checkpoint of the agent ([`crate::checkpoint`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::checkpoint::CheckpointFile;
use crate::device::allocation::container_allocation::ContainerAllocation;

/// The checkpoint's file name in the device plugin directory. The kubelet's
/// own file (`kubelet_internal_checkpoint`) has a different format and is left alone.
pub const CHECKPOINT_FILE: &str = "nodeplugins_device_checkpoint";
/// The backup's file name: the same bytes, written right after the checkpoint.
pub const BACKUP_FILE: &str = "nodeplugins_device_checkpoint.backup";

/// What the device checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceCheckpoint {
    /// Every container allocation.
    pub allocations: Vec<ContainerAllocation>,
    /// Resource → ids of its healthy devices when last written.
    pub registered_devices: BTreeMap<String, Vec<String>>,
}

/// The device checkpoint as the manager writes it: the JSON of
/// [`DeviceCheckpoint`], from allocations shared with the manager rather
/// than copied, so a write holds up the manager for no more than a
/// reference count per allocation.
#[derive(Debug, serde::Serialize)]
pub(crate) struct CheckpointData {
    pub(crate) allocations: Vec<Arc<ContainerAllocation>>,
    pub(crate) registered_devices: BTreeMap<String, Vec<String>>,
}

/// The device checkpoint and its backup in the device plugin directory `dir`.
pub(crate) fn file(dir: &Path) -> CheckpointFile {
    CheckpointFile::new(
        "device checkpoint",
        dir.join(CHECKPOINT_FILE),
        dir.join(BACKUP_FILE),
    )
}

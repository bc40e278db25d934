//! Whether the node rebooted since the agent last ran: the kernel's boot
//! id (`/proc/sys/kernel/random/boot_id`, new at every boot) against the
//! one the agent recorded. After a reboot nothing the plugins set up for a
//! pod can be trusted (a device's configuration, a CDI spec on a tmpfs),
//! and no container runs: every pod's devices are allocated and its
//! claims prepared again before its containers are made again.

use std::path::Path;

/// Where the kernel tells the boot id.
pub(crate) const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

/// The current boot id (empty when the kernel does not tell it).
pub fn current_boot_id() -> String {
    std::fs::read_to_string(BOOT_ID_FILE)
        .map(|id| id.trim().to_string())
        .unwrap_or_default()
}

/// Whether the boot recorded in `record` is not `boot_id` (a first run,
/// with nothing recorded, is not a reboot); records `boot_id` there.
pub(crate) fn rebooted(record: &Path, boot_id: &str) -> bool {
    let recorded = std::fs::read_to_string(record)
        .ok()
        .map(|id| id.trim().to_string());
    if recorded.as_deref() != Some(boot_id) {
        let tmp = record.with_extension("tmp");
        let written = std::fs::write(&tmp, boot_id).and_then(|()| std::fs::rename(&tmp, record));
        if let Err(e) = written {
            tracing::warn!(file = %record.display(), error = %e, "cannot record the boot id");
        }
    }
    recorded.is_some_and(|id| id != boot_id)
}

/// The node rebooted since the agent last ran: no container runs, and
/// what the plugins set up for pods may be gone. Every pod's devices are
/// given back, to be allocated again (Allocate called) when it is admitted
/// again, and its claims are to be prepared again (NodePrepareResources
/// called), before its containers are made again. Fails when a manager
/// stopped.
pub(crate) async fn after_reboot(
    devices: &crate::device::DeviceHandle,
    dra: &crate::dra::DraHandle,
) -> Result<(), ()> {
    let snapshot = devices.snapshot();
    let mut uids: Vec<&str> = snapshot
        .allocations()
        .iter()
        .map(|a| a.pod_uid.as_str())
        .collect();
    uids.dedup();
    tracing::warn!(
        pods = uids.len(),
        "the node rebooted since the agent last ran: every pod's devices are allocated and its claims prepared again"
    );
    for uid in uids {
        devices.release(uid).await.map_err(|_| ())?;
    }
    dra.prepare_again(None).await.map_err(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_reboot_is_a_boot_id_other_than_the_one_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("boot-id");
        assert!(!rebooted(&record, "a"), "nothing recorded: a first run");
        assert!(!rebooted(&record, "a"), "the same boot");
        assert!(rebooted(&record, "b"), "another boot");
        assert!(!rebooted(&record, "b"), "recorded");
        assert!(!current_boot_id().is_empty());
    }
}

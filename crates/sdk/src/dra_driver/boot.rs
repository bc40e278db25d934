//! The identity of this boot of the machine, which tells prepared records
//! made before a reboot from those made since.

/// Where the kernel gives each boot a random identity.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's identity, or `None` where the kernel does not say.
pub(super) fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string(BOOT_ID_PATH).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

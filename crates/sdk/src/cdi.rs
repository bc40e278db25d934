//! CDI spec files, as the container runtime reads them from its CDI
//! directories (`/etc/cdi`, `/var/run/cdi`): what a container gets for a
//! device (`ContainerEdits`: environment, device nodes, mounts), named
//! `<vendor>/<class>=<name>` in a CDI device id. A DRA driver's prepared
//! claims and a device plugin's devices are written as specs here, and
//! their CDI ids go to the kubelet, which hands them to the runtime.
//!
//! A file is written atomically: to a hidden temporary file of its own
//! (`.<name>.<pid>-<n>.tmp`, created new, mode 0644) in the same directory,
//! synced, renamed over the spec, and the directory synced; a failed write
//! removes its temporary file. Two writers (the instances of a rolling
//! update) never share a temporary file, and the runtime never reads a
//! half-written spec.

mod edits;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use edits::{CdiDeviceNode, CdiMount, ContainerEdits};

/// The CDI version of the files written.
pub const CDI_VERSION: &str = "0.6.0";
/// The default CDI spec directory.
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    cdi_version: &'static str,
    kind: &'a str,
    devices: Vec<SpecDevice<'a>>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SpecDevice<'a> {
    name: &'a str,
    container_edits: &'a ContainerEdits,
}

/// Whether `name` may be a CDI device's name: letters, digits, `-`, `_`,
/// `.` and `:`, starting and ending with a letter or digit.
pub(crate) fn is_device_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Writes the spec of kind `kind` (`vendor/class`) with `devices` (each a
/// name and its edits) to `path`, atomically, making its directory.
pub(crate) fn write_spec(
    path: &Path,
    kind: &str,
    devices: &[(String, &ContainerEdits)],
) -> std::io::Result<()> {
    let spec = Spec {
        cdi_version: CDI_VERSION,
        kind,
        devices: devices
            .iter()
            .map(|(name, edits)| SpecDevice {
                name,
                container_edits: edits,
            })
            .collect(),
    };
    let bytes = serde_json::to_vec_pretty(&spec).map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    write_atomically(path, &bytes)
}

/// Tells apart the temporary files of one process.
static TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically; see the module's documentation.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        // Whatever the umask: every reader of the directory may read it.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_follow_the_cdi_grammar() {
        for name in ["gpu-0", "0", "a.b_c:d"] {
            assert!(is_device_name(name), "{name}");
        }
        for name in ["", "-gpu", "gpu/0", "gpu 0", "gpu-"] {
            assert!(!is_device_name(name), "{name}");
        }
    }
}

//! A `local` PersistentVolume's directory in a pod, as the kubelet's local
//! plugin sets it up: the volume's path bind-mounted onto the pod's
//! `volumes/kubernetes.io~local-volume/<volume>` (made 0750), read-only
//! when the pod's claim says so, the volume's `mountOptions` applied; the
//! pod's fsGroup over it when it is writable and no other pod of the node
//! has it mounted already. Torn down by unmounting and removing that
//! directory; the volume's own files are never touched. A path that is a
//! block device (formatted and mounted by the kubelet) is not set up.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, UnmountFlags};

use crate::volumes::kinds::{ownership, tmpfs};
use crate::volumes::layout::{self, PodDirs};

/// The local volume plugin.
pub(crate) const PLUGIN: &str = "kubernetes.io/local-volume";

/// One pod's use of a local volume.
pub(crate) struct LocalMount<'a> {
    /// The PersistentVolume's name.
    pub(crate) volume: &'a str,
    /// Its `local.path`.
    pub(crate) path: &'a str,
    /// The pod's claim is read-only.
    pub(crate) read_only: bool,
    /// The PersistentVolume's `mountOptions`.
    pub(crate) mount_options: &'a [String],
    /// The pod's fsGroup.
    pub(crate) fs_group: Option<u32>,
}

/// Sets the volume up in the pod of `dirs` (nothing done when it is
/// mounted there already) and gives its directory there.
pub(crate) fn set_up(dirs: &PodDirs, local: &LocalMount<'_>) -> Result<PathBuf, String> {
    if local.path.is_empty() {
        return Err("local volume source is nil or local path is not set".to_string());
    }
    if Path::new(local.path)
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!(
            "invalid path: {} must not contain '..'",
            local.path
        ));
    }
    let kind = std::fs::metadata(local.path).map_err(|e| e.to_string())?;
    if kind.file_type().is_block_device() {
        return Err(format!(
            "local volume {}: a block device is not set up by this node (only directories)",
            local.volume
        ));
    }
    if !kind.is_dir() {
        return Err("only directory and block device are supported".to_string());
    }
    let dir = dirs.volume(PLUGIN, local.volume);
    if tmpfs::is_mount_point(&dir) {
        return Ok(dir);
    }
    let shared = mounted_elsewhere(dirs, local.volume);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(&dir)
        .map_err(|e| format!("mkdir failed on disk {} ({e})", dir.display()))?;
    if let Err(e) = bind(
        Path::new(local.path),
        &dir,
        local.read_only,
        local.mount_options,
    ) {
        if tmpfs::is_mount_point(&dir) {
            let _ = tmpfs::unmount(&dir);
        }
        let _ = std::fs::remove_dir(&dir);
        return Err(format!("mount of volume {} failed: {e}", dir.display()));
    }
    if !local.read_only
        && !shared
        && let Some(gid) = local.fs_group
    {
        ownership::apply(&dir, gid, false).map_err(|e| e.to_string())?;
    }
    Ok(dir)
}

/// Tears the volume at `dir` down: unmounted, its directory removed.
pub(crate) fn tear_down(dir: &Path) -> Result<(), String> {
    if tmpfs::is_mount_point(dir) {
        tmpfs::unmount(dir).map_err(|e| format!("failed to unmount {}: {e}", dir.display()))?;
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("failed to remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Whether another pod of the node has volume `volume` mounted.
fn mounted_elsewhere(dirs: &PodDirs, volume: &str) -> bool {
    let Some(pods) = dirs.pod_dir().parent() else {
        return false;
    };
    let Ok(entries) = std::fs::read_dir(pods) else {
        return false;
    };
    entries.flatten().any(|pod| {
        let other = pod.path();
        other != dirs.pod_dir()
            && tmpfs::is_mount_point(
                &other
                    .join("volumes")
                    .join(layout::escape(PLUGIN))
                    .join(volume),
            )
    })
}

/// Binds `source` onto `target`, then remounts it read-only and with the
/// options the kernel takes for a bind mount (`noatime`, `nodev`, …;
/// others are a file system's and do not apply to a bind).
fn bind(source: &Path, target: &Path, read_only: bool, options: &[String]) -> std::io::Result<()> {
    rustix::mount::mount_bind(source, target)?;
    let mut flags = MountFlags::empty();
    if read_only {
        flags |= MountFlags::RDONLY;
    }
    for option in options.iter().flat_map(|o| o.split(',')) {
        flags |= match option.trim() {
            "ro" => MountFlags::RDONLY,
            "noatime" => MountFlags::NOATIME,
            "nodiratime" => MountFlags::NODIRATIME,
            "relatime" => MountFlags::RELATIME,
            "strictatime" => MountFlags::STRICTATIME,
            "nodev" => MountFlags::NODEV,
            "nosuid" => MountFlags::NOSUID,
            "noexec" => MountFlags::NOEXEC,
            _ => MountFlags::empty(),
        };
    }
    if flags.is_empty() {
        return Ok(());
    }
    let remounted = rustix::mount::mount_remount(target, flags | MountFlags::BIND, "");
    if let Err(e) = remounted {
        let _ = rustix::mount::unmount(target, UnmountFlags::empty());
        return Err(e.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_local_directory_is_bound_into_the_pod_read_only_when_claimed_so() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("disk");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("f"), "x").unwrap();
        let dirs = PodDirs::new(&root.path().join("pods"), "u1");
        let local = LocalMount {
            volume: "pv-1",
            path: data.to_str().unwrap(),
            read_only: true,
            mount_options: &["noatime".to_string()],
            fs_group: Some(1234),
        };
        let dir = set_up(&dirs, &local).unwrap();
        assert_eq!(
            dir,
            root.path()
                .join("pods/u1/volumes/kubernetes.io~local-volume/pv-1")
        );
        assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "x");
        let stat = rustix::fs::statvfs(&dir).unwrap();
        assert!(stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
        assert!(stat.f_flag.contains(rustix::fs::StatVfsMountFlags::NOATIME));
        // Set up again: nothing more is mounted.
        assert_eq!(set_up(&dirs, &local).unwrap(), dir);
        tear_down(&dir).unwrap();
        assert!(tear_down(&dir).is_ok());
        assert!(!dir.exists());
        assert_eq!(std::fs::read_to_string(data.join("f")).unwrap(), "x");
    }

    #[test]
    fn a_path_with_backsteps_or_a_file_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dirs = PodDirs::new(&root.path().join("pods"), "u1");
        let file = root.path().join("file");
        std::fs::write(&file, "").unwrap();
        let mut local = LocalMount {
            volume: "pv-1",
            path: "/a/../b",
            read_only: false,
            mount_options: &[],
            fs_group: None,
        };
        assert!(
            set_up(&dirs, &local)
                .unwrap_err()
                .starts_with("invalid path")
        );
        local.path = file.to_str().unwrap();
        assert_eq!(
            set_up(&dirs, &local).unwrap_err(),
            "only directory and block device are supported"
        );
    }
}

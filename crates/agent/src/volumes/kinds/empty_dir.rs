//! An emptyDir: a directory of the pod's own, 0777, on the node's disk or
//! (`medium: Memory`) a tmpfs sized as the kubelet sizes it (the least of
//! the node's allocatable memory, the pod's memory limit and the volume's
//! `sizeLimit`), with its ready file under the pod's `plugins`. The
//! secret, configMap, downwardAPI and projected volumes sit on one too
//! (named `wrapped_<name>`): a tmpfs for all but configMap.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::volumes::kinds::tmpfs;
use crate::volumes::layout::PodDirs;

/// Sets up the emptyDir `name` (its ready file named `ready_name`) at
/// `dir`, on a tmpfs of `size` bytes when `memory`. Idempotent: a tmpfs
/// already mounted stays.
pub(crate) fn set_up(
    dirs: &PodDirs,
    dir: &Path,
    ready_name: &str,
    memory: bool,
    size: Option<u64>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if memory && !tmpfs::is_mount_point(dir) {
        tmpfs::mount(dir, size)?;
    }
    if !memory {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
    }
    let ready = dirs.empty_dir_ready(ready_name);
    if let Some(parent) = ready.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if !ready.exists() {
        std::fs::write(&ready, b"")?;
    }
    Ok(())
}

/// Tears down the emptyDir at `dir`: unmounted if something is mounted on
/// it, then removed with what it holds.
pub(crate) fn tear_down(dir: &Path) -> std::io::Result<()> {
    if tmpfs::is_mount_point(dir) {
        tmpfs::unmount(dir)?;
        if tmpfs::is_mount_point(dir) {
            return Err(std::io::Error::other(format!(
                "{} is still a mount point",
                dir.display()
            )));
        }
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The size of a memory-backed emptyDir of `pod`: the least of the node's
/// allocatable memory, the pod's memory limit and `size_limit` (bytes;
/// none known: no `size=`).
pub(crate) fn memory_size(
    allocatable: Option<i64>,
    pod_limit: Option<i64>,
    size_limit: Option<i64>,
) -> Option<u64> {
    [allocatable, pod_limit, size_limit]
        .into_iter()
        .flatten()
        .filter(|v| *v > 0)
        .min()
        .and_then(|v| u64::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_tmpfs_gets_the_least_size_known() {
        assert_eq!(
            memory_size(Some(8 << 30), Some(64 << 20), None),
            Some(64 << 20)
        );
        assert_eq!(
            memory_size(Some(8 << 30), None, Some(1 << 20)),
            Some(1 << 20)
        );
        assert_eq!(memory_size(None, None, None), None);
    }

    #[test]
    fn a_disk_empty_dir_is_0777_with_its_ready_file_and_goes_with_its_content() {
        let root = tempfile::tempdir().unwrap();
        let dirs = PodDirs::new(root.path(), "u1");
        dirs.make().unwrap();
        let dir = dirs.volume(crate::volumes::layout::EMPTY_DIR, "scratch");
        set_up(&dirs, &dir, "scratch", false, None).unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o777
        );
        assert!(dirs.empty_dir_ready("scratch").exists());
        std::fs::write(dir.join("data"), b"x").unwrap();
        set_up(&dirs, &dir, "scratch", false, None).unwrap();
        assert!(dir.join("data").exists(), "set up again keeps the content");
        tear_down(&dir).unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn a_memory_empty_dir_is_a_tmpfs_unmounted_at_tear_down() {
        let root = tempfile::tempdir().unwrap();
        let dirs = PodDirs::new(root.path(), "u1");
        dirs.make().unwrap();
        let dir = dirs.volume(crate::volumes::layout::EMPTY_DIR, "mem");
        set_up(&dirs, &dir, "mem", true, Some(1 << 20)).unwrap();
        assert!(tmpfs::is_mount_point(&dir));
        set_up(&dirs, &dir, "mem", true, Some(1 << 20)).unwrap();
        tear_down(&dir).unwrap();
        assert!(!dir.exists());
    }
}

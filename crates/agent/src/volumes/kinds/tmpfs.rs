//! The tmpfs a memory-backed volume lives on (an emptyDir of `medium:
//! Memory`, and the secret, downwardAPI and projected volumes, which the
//! kubelet backs with one so that their content never touches the disk),
//! and the mount table's word on what is mounted.

use std::path::Path;

use rustix::mount::{MountFlags, UnmountFlags};

/// Mounts a tmpfs on `dir`, with `size=` when given.
pub(crate) fn mount(dir: &Path, size: Option<u64>) -> std::io::Result<()> {
    let data = size.map(|s| format!("size={s}")).unwrap_or_default();
    let data = std::ffi::CString::new(data).map_err(std::io::Error::other)?;
    rustix::mount::mount(
        "tmpfs",
        dir,
        "tmpfs",
        MountFlags::empty(),
        Some(data.as_c_str()),
    )
    .map_err(std::io::Error::from)
}

/// Unmounts what is mounted on `dir`.
pub(crate) fn unmount(dir: &Path) -> std::io::Result<()> {
    rustix::mount::unmount(dir, UnmountFlags::empty()).map_err(std::io::Error::from)
}

/// Whether something is mounted on `dir` (its device differs from its
/// parent's, or the mount table names it).
pub(crate) fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(own), Some(parent)) = (std::fs::symlink_metadata(dir), dir.parent()) else {
        return false;
    };
    let Ok(up) = std::fs::metadata(parent) else {
        return false;
    };
    if own.dev() != up.dev() {
        return true;
    }
    // A bind mount of the same file system: the mount table tells.
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = dir.to_string_lossy();
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| unescape_octal(point) == wanted)
}

/// A mount table path with its `\040`-style escapes read.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Some(digits) = text.get(i + 1..i + 4)
            && let Ok(value) = u8::from_str_radix(digits, 8)
        {
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_tmpfs_is_mounted_sized_and_unmounted() {
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("m");
        std::fs::create_dir(&point).unwrap();
        assert!(!is_mount_point(&point));
        mount(&point, Some(1 << 20)).unwrap();
        assert!(is_mount_point(&point));
        let stat = rustix::fs::statvfs(&point).unwrap();
        assert_eq!(stat.f_blocks * stat.f_frsize, 1 << 20);
        unmount(&point).unwrap();
        assert!(!is_mount_point(&point));
    }

    #[test]
    fn mount_table_escapes_are_read() {
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
        assert_eq!(unescape_octal("/plain"), "/plain");
    }
}

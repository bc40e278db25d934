//! A pod's `fsGroup` over a volume, as the kubelet's
//! `VolumeOwnership.ChangePermissions` applies it: every file and
//! directory under it given the group, files made group-readable and
//! writable (`|= 0660`, or `|= 0440` for a read-only volume), directories
//! also group-searchable and setgid (`|= 02110`), symlinks given the group
//! but never a mode. emptyDir, configMap, secret, downwardAPI and projected
//! volumes are walked every time.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const RW: u32 = 0o660;
const RO: u32 = 0o440;
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// Applies `gid` to `dir` and everything under it.
pub(crate) fn apply(dir: &Path, gid: u32, read_only: bool) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    let mask = if read_only { RO } else { RW };
    std::os::unix::fs::lchown(dir, None, Some(gid))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.mode() & 0o7777;
    if meta.is_dir() {
        std::fs::set_permissions(
            dir,
            std::fs::Permissions::from_mode(mode | mask | SETGID | EXEC),
        )?;
        for entry in std::fs::read_dir(dir)? {
            apply(&entry?.path(), gid, read_only)?;
        }
    } else {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | mask))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_group_reaches_every_file_and_directories_become_setgid() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        let file = sub.join("f");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("sub/f", dir.path().join("link")).unwrap();
        apply(dir.path(), 2000, false).unwrap();
        let f = std::fs::metadata(&file).unwrap();
        assert_eq!(f.gid(), 2000);
        assert_eq!(f.mode() & 0o7777, 0o660);
        let s = std::fs::metadata(&sub).unwrap();
        assert_eq!(s.mode() & 0o7777, 0o2770);
        let link = std::fs::symlink_metadata(dir.path().join("link")).unwrap();
        assert_eq!(link.gid(), 2000);
        apply(dir.path(), 3000, true).unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().mode() & 0o7777,
            0o660,
            "modes only grow"
        );
    }
}

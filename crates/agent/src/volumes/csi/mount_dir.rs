//! The directories the kubelet makes for a CSI volume (each 0750, the
//! driver making the last one, `mount` or `globalmount`, its own) and
//! removes once nothing is mounted there (`removeMountDir`), with the
//! `vol_data.json` beside them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::volumes::csi::vol_data;
use crate::volumes::kinds::tmpfs;

/// The mode of the directories the kubelet makes for a volume.
pub(crate) const DIR_MODE: u32 = 0o750;

/// Makes `dir` and its missing parents, each 0750.
pub(crate) fn make_dirs(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        make_dirs(parent)?;
    }
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Removes `mount` (a publish target or a staging directory), the
/// `vol_data.json` beside it and their directory, unless something is
/// still mounted there (`removeMountDir`).
pub(crate) fn remove_mount_dir(mount: &Path) -> std::io::Result<()> {
    if tmpfs::is_mount_point(mount) {
        return Ok(());
    }
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    gone(std::fs::remove_dir(mount))?;
    if let Some(dir) = mount.parent() {
        vol_data::remove(dir)?;
        gone(std::fs::remove_dir(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::volumes::csi::vol_data::VolData;

    #[test]
    fn a_mount_dir_is_removed_with_its_data_and_directory_once_nothing_is_mounted() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("pv");
        std::fs::create_dir_all(dir.join("mount")).unwrap();
        vol_data::save(&dir, &VolData::new()).unwrap();
        remove_mount_dir(&dir.join("mount")).unwrap();
        assert!(!dir.exists());
        remove_mount_dir(&dir.join("mount")).unwrap();
    }

    #[test]
    fn a_mount_dir_with_content_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let mount = root.path().join("pv").join("mount");
        std::fs::create_dir_all(&mount).unwrap();
        std::fs::write(mount.join("data"), b"x").unwrap();
        assert!(remove_mount_dir(&mount).is_err());
        assert!(mount.join("data").exists());
    }
}

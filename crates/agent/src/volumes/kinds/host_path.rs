//! A hostPath volume: the host's own path, checked against its `type` as
//! the kubelet's `checkTypeInternal` checks it (and made, for
//! `DirectoryOrCreate` with 0755 and `FileOrCreate` with 0644, whose
//! parent must exist). Nothing is mounted and nothing is torn down.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

/// Why a hostPath volume cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("hostPath type check failed: {path} is not a {what}")]
pub(crate) struct HostPathError {
    path: String,
    what: &'static str,
}

/// Checks (and makes, for the `OrCreate` types) `path` as `type_` says.
pub(crate) fn check(path: &str, type_: Option<&str>) -> Result<(), HostPathError> {
    let fail = |what| HostPathError {
        path: path.to_string(),
        what,
    };
    let p = Path::new(path);
    let meta = std::fs::metadata(p);
    match type_.unwrap_or("") {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if meta.as_ref().is_ok_and(|m| m.is_dir()) {
                return Ok(());
            }
            if meta.is_ok() {
                return Err(fail("directory"));
            }
            std::fs::create_dir_all(p).map_err(|_| fail("directory"))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                .map_err(|_| fail("directory"))
        }
        "Directory" => meta
            .is_ok_and(|m| m.is_dir())
            .then_some(())
            .ok_or(fail("directory")),
        "FileOrCreate" => {
            if meta.as_ref().is_ok_and(|m| m.is_file()) {
                return Ok(());
            }
            if meta.is_ok() {
                return Err(fail("file"));
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .map_err(|_| fail("file"))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644))
                .map_err(|_| fail("file"))
        }
        "File" => meta
            .is_ok_and(|m| m.is_file())
            .then_some(())
            .ok_or(fail("file")),
        "Socket" => meta
            .is_ok_and(|m| m.file_type().is_socket())
            .then_some(())
            .ok_or(fail("socket file")),
        "CharDevice" => meta
            .is_ok_and(|m| m.file_type().is_char_device())
            .then_some(())
            .ok_or(fail("character device")),
        "BlockDevice" => meta
            .is_ok_and(|m| m.file_type().is_block_device())
            .then_some(())
            .ok_or(fail("block device")),
        _ => Err(fail("known hostPath type")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_type_is_checked_and_the_or_create_types_made() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b");
        let ds = d.to_string_lossy().into_owned();
        assert!(check(&ds, Some("Directory")).is_err());
        check(&ds, Some("DirectoryOrCreate")).unwrap();
        assert_eq!(
            std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o755
        );
        check(&ds, Some("Directory")).unwrap();
        let f = d.join("f").to_string_lossy().into_owned();
        check(&f, Some("FileOrCreate")).unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o644
        );
        check(&f, Some("File")).unwrap();
        let err = check(&ds, Some("File")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("hostPath type check failed: {ds} is not a file")
        );
        assert!(check("/dev/null", Some("CharDevice")).is_ok());
        assert!(check(&f, Some("Socket")).is_err());
        assert!(check("/nowhere/at/all", None).is_ok(), "no type: no check");
        let orphan = dir.path().join("missing/f").to_string_lossy().into_owned();
        assert!(
            check(&orphan, Some("FileOrCreate")).is_err(),
            "its parent must exist"
        );
    }
}

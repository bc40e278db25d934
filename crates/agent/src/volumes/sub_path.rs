//! A container's `subPath` mount, made as the kubelet makes it so that a
//! volume's content cannot point the mount outside the volume (a symlink
//! planted by a container, swapped in between a check and the mount):
//!
//! - a missing subPath is made one directory at a time from the volume's
//!   root, each opened without following symlinks, with the root's mode
//!   (`SafeMakeDir`);
//! - the subPath is resolved, must stay within the resolved volume, and is
//!   opened the same way, component by component, refusing any symlink
//!   on the way (`doSafeOpen`);
//! - what was opened (not the path, which may change) is bind-mounted
//!   through `/proc/self/fd` onto
//!   `pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, a directory
//!   or an empty file like the source, and that is what the container
//!   mounts; a target already bound to the same file is kept, one bound to
//!   another is unmounted first (`doBindSubPath`);
//! - at the pod's tear-down every target is unmounted and removed before
//!   the volumes are (`CleanSubPaths`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags};
use rustix::mount::UnmountFlags;

use crate::volumes::csi::mount_dir::make_dirs;
use crate::volumes::kinds::tmpfs;

/// The directory under a pod's directory that holds its subPath mounts.
pub(crate) const SUB_PATHS: &str = "volume-subpaths";

/// One subPath mount of a container.
pub(crate) struct SubPath<'a> {
    /// The volume's root on the host.
    pub(crate) volume: &'a Path,
    /// The volume's name in the pod's directories.
    pub(crate) volume_name: &'a str,
    /// The subPath, relative to the volume's root.
    pub(crate) path: &'a Path,
    /// The pod's directory (`pods/<uid>`).
    pub(crate) pod_dir: &'a Path,
    pub(crate) container: &'a str,
    /// The mount's index among the container's `volumeMounts`.
    pub(crate) index: usize,
}

impl SubPath<'_> {
    /// Where the subPath is bound for the container.
    pub(crate) fn target(&self) -> PathBuf {
        self.pod_dir
            .join(SUB_PATHS)
            .join(self.volume_name)
            .join(self.container)
            .join(self.index.to_string())
    }

    /// Makes the subPath when missing, binds it onto its target, and says
    /// where that is: what the container mounts.
    pub(crate) fn prepare(&self) -> io::Result<PathBuf> {
        let full = self.volume.join(self.path);
        if std::fs::symlink_metadata(&full).is_err() {
            let mode = std::fs::metadata(self.volume)?.permissions().mode() & 0o7777;
            safe_make_dir(self.volume, self.path, mode)?;
        }
        let volume = std::fs::canonicalize(self.volume)?;
        let resolved = std::fs::canonicalize(&full)?;
        if !resolved.starts_with(&volume) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "subpath {:?} not within volume path {:?}",
                    resolved.display().to_string(),
                    volume.display().to_string()
                ),
            ));
        }
        let opened = safe_open(&volume, &resolved)?;
        let target = self.target();
        if tmpfs::is_mount_point(&target) {
            if same_file(&resolved, &target)? {
                return Ok(target);
            }
            rustix::mount::unmount(&target, UnmountFlags::empty())?;
        }
        if let Some(parent) = target.parent() {
            make_dirs(parent)?;
        }
        if std::fs::symlink_metadata(&resolved)?.is_dir() {
            match std::fs::create_dir(&target) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o750))?,
            }
        } else if std::fs::symlink_metadata(&target).is_err() {
            std::fs::write(&target, b"")?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640))?;
        }
        let source = format!("/proc/self/fd/{}", opened.as_fd().as_raw_fd());
        if let Err(e) = rustix::mount::mount_bind(source.as_str(), &target) {
            let _ = clean_one(&target);
            return Err(io::Error::other(format!(
                "error mounting {}: {e}",
                resolved.display()
            )));
        }
        Ok(target)
    }
}

/// Unmounts and removes every subPath target of the pod at `pod_dir`.
pub(crate) fn clean(pod_dir: &Path) -> io::Result<()> {
    let root = pod_dir.join(SUB_PATHS);
    let volumes = match std::fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for volume in volumes {
        let volume = volume?.path();
        for container in std::fs::read_dir(&volume)? {
            let container = container?.path();
            if !container.is_dir() {
                continue;
            }
            for target in std::fs::read_dir(&container)? {
                clean_one(&target?.path())?;
            }
            std::fs::remove_dir(&container)?;
        }
        std::fs::remove_dir(&volume)?;
    }
    std::fs::remove_dir(&root)
}

/// Unmounts `target` if something is mounted there, and removes it.
fn clean_one(target: &Path) -> io::Result<()> {
    if tmpfs::is_mount_point(target) {
        rustix::mount::unmount(target, UnmountFlags::empty())?;
    }
    match std::fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir(target),
        Ok(_) => std::fs::remove_file(target),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `a` and `b` are the same file (device and inode).
fn same_file(a: &Path, b: &Path) -> io::Result<bool> {
    let (a, b) = (std::fs::metadata(a)?, std::fs::metadata(b)?);
    Ok(a.dev() == b.dev() && a.ino() == b.ino())
}

/// The components of `relative`, each a plain name.
fn names(relative: &Path) -> io::Result<Vec<&std::ffi::OsStr>> {
    relative
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid path {}", relative.display()),
            )),
        })
        .collect()
}

/// Opens `dir` (a directory, not a symlink) for walking.
fn open_dir(at: impl AsFd, name: &std::ffi::OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        at,
        name,
        OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )?)
}

/// Makes `relative` under `base`, one directory at a time, none of them
/// followed if a symlink, each with `mode`.
fn safe_make_dir(base: &Path, relative: &Path, mode: u32) -> io::Result<()> {
    let mut dir = rustix::fs::openat(
        CWD,
        base,
        OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )?;
    for name in names(relative)? {
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {
                let made = open_dir(&dir, name)?;
                // The umask took its part: the mode is set as asked.
                rustix::fs::fchmod(&made, Mode::from_raw_mode(mode))?;
                dir = made;
            }
            Err(rustix::io::Errno::EXIST) => dir = open_dir(&dir, name)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Opens `path` (within `base`, both resolved) one component at a time
/// from `base`, refusing a symlink on the way.
fn safe_open(base: &Path, path: &Path) -> io::Result<OwnedFd> {
    let relative = path.strip_prefix(base).map_err(|_| {
        io::Error::other(format!(
            "{} is not within {}",
            path.display(),
            base.display()
        ))
    })?;
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(CWD, base, flags, Mode::empty())?;
    for name in names(relative)? {
        let next = rustix::fs::openat(&fd, name, flags, Mode::empty())?;
        let stat = rustix::fs::fstat(&next)?;
        if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is a symlink", Path::new(name).display()),
            ));
        }
        fd = next;
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_missing_sub_path_is_made_without_following_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let volume = root.path().join("volume");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(&volume).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, volume.join("link")).unwrap();
        safe_make_dir(&volume, Path::new("a/b"), 0o2775).unwrap();
        let made = std::fs::metadata(volume.join("a/b")).unwrap();
        assert_eq!(made.permissions().mode() & 0o7777, 0o2775);
        assert!(safe_make_dir(&volume, Path::new("link/escape"), 0o755).is_err());
        assert!(
            !outside.join("escape").exists(),
            "nothing made outside the volume"
        );
    }

    #[test]
    fn a_sub_path_opened_refuses_a_symlink_on_the_way() {
        let root = tempfile::tempdir().unwrap();
        let volume = root.path().join("volume");
        std::fs::create_dir_all(volume.join("real/inner")).unwrap();
        std::os::unix::fs::symlink(volume.join("real"), volume.join("link")).unwrap();
        assert!(safe_open(&volume, &volume.join("real/inner")).is_ok());
        assert!(safe_open(&volume, &volume.join("link/inner")).is_err());
    }

    #[test]
    fn a_sub_path_resolving_outside_its_volume_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let volume = root.path().join("volume");
        std::fs::create_dir_all(&volume).unwrap();
        std::os::unix::fs::symlink("/etc", volume.join("etc")).unwrap();
        let pod = root.path().join("pod");
        let sub_path = SubPath {
            volume: &volume,
            volume_name: "data",
            path: Path::new("etc"),
            pod_dir: &pod,
            container: "main",
            index: 0,
        };
        let error = sub_path.prepare().unwrap_err();
        assert!(
            error.to_string().contains("not within volume path"),
            "{error}"
        );
        assert!(!sub_path.target().exists());
    }
}

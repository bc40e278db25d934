//! The volumes of the SDK's CSI node driver: each a directory of its own
//! under the driver's state directory, staged (recorded, for a driver that
//! stages) and published by a bind mount onto the target the node names
//! (read-only when asked), unpublished by unmounting and removing the
//! target, as the CSI specification asks of a node plugin. An inline
//! volume (`csi.storage.k8s.io/ephemeral` is `"true"` in its context) is
//! made at its publish and removed at its unpublish.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nodeplugins_api::csi::v1 as csi;
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use tonic::Status;

/// The volume-context key that marks an inline volume.
const EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";

/// The driver's volumes.
#[derive(Debug)]
pub(crate) struct Volumes {
    state_dir: PathBuf,
    /// Whether the driver stages (`STAGE_UNSTAGE_VOLUME`).
    pub(crate) stages: bool,
    /// Volume → the path it is staged at.
    staged: Mutex<HashMap<String, String>>,
}

/// `text` made a safe file name (a volume ID may hold any character).
fn file_name(volume_id: &str) -> String {
    volume_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn required<'a>(value: &'a str, what: &str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{what} missing in request"
        )));
    }
    Ok(value)
}

fn internal(what: &str, path: &Path, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what} {}: {e}", path.display()))
}

/// Whether something is mounted on `path` (the mount table names it).
fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy().replace(' ', "\\040");
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| point == wanted)
}

impl Volumes {
    /// Volumes under `state_dir`; staged first when `stages`.
    pub(crate) fn new(state_dir: PathBuf, stages: bool) -> Self {
        Self {
            state_dir,
            stages,
            staged: Mutex::new(HashMap::new()),
        }
    }

    /// Where volume `volume_id`'s data lives.
    fn data_dir(&self, volume_id: &str) -> PathBuf {
        self.state_dir.join(file_name(volume_id))
    }

    /// The mark of an inline volume, beside its data.
    fn ephemeral_mark(&self, volume_id: &str) -> PathBuf {
        self.state_dir
            .join(format!("{}.ephemeral", file_name(volume_id)))
    }

    fn make_data_dir(&self, volume_id: &str) -> Result<PathBuf, Status> {
        let dir = self.data_dir(volume_id);
        std::fs::create_dir_all(&dir).map_err(|e| internal("cannot make", &dir, e))?;
        Ok(dir)
    }

    /// `NodeStageVolume`: the volume's data made if new, its staging path
    /// recorded; staged at another path already is refused.
    pub(crate) fn stage(&self, request: &csi::NodeStageVolumeRequest) -> Result<(), Status> {
        let id = required(&request.volume_id, "volume ID")?;
        let path = required(&request.staging_target_path, "staging target path")?;
        if request.volume_capability.is_none() {
            return Err(Status::invalid_argument(
                "volume capability missing in request",
            ));
        }
        let mut staged = self
            .staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = staged.get(id)
            && at != path
        {
            return Err(Status::failed_precondition(format!(
                "volume {id} is staged at {at} already, not at {path}"
            )));
        }
        self.make_data_dir(id)?;
        staged.insert(id.to_string(), path.to_string());
        Ok(())
    }

    /// `NodeUnstageVolume`: forgets the staging path.
    pub(crate) fn unstage(&self, request: &csi::NodeUnstageVolumeRequest) -> Result<(), Status> {
        let id = required(&request.volume_id, "volume ID")?;
        required(&request.staging_target_path, "staging target path")?;
        self.staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
        Ok(())
    }

    /// `NodePublishVolume`: the volume's data bind-mounted on the target
    /// (made 0750 if missing); a volume of a driver that stages must be
    /// staged at the path given.
    pub(crate) fn publish(&self, request: &csi::NodePublishVolumeRequest) -> Result<(), Status> {
        let id = required(&request.volume_id, "volume ID")?;
        let target = PathBuf::from(required(&request.target_path, "target path")?);
        if request.volume_capability.is_none() {
            return Err(Status::invalid_argument(
                "volume capability missing in request",
            ));
        }
        let ephemeral = request.volume_context.get(EPHEMERAL).map(String::as_str) == Some("true");
        if self.stages && !ephemeral {
            let staged = self
                .staged
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match staged.get(id) {
                Some(at) if *at == request.staging_target_path => {}
                Some(at) => {
                    return Err(Status::failed_precondition(format!(
                        "volume {id} is staged at {at}, not at {:?}",
                        request.staging_target_path
                    )));
                }
                None => {
                    return Err(Status::failed_precondition(format!(
                        "volume {id} is not staged"
                    )));
                }
            }
        }
        if is_mount_point(&target) {
            return Ok(());
        }
        let source = self.make_data_dir(id)?;
        if ephemeral {
            let mark = self.ephemeral_mark(id);
            std::fs::write(&mark, b"").map_err(|e| internal("cannot write", &mark, e))?;
        }
        if !target.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| internal("cannot make", &target, e))?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o750))
                .map_err(|e| internal("cannot set the mode of", &target, e))?;
        }
        rustix::mount::mount_bind(&source, &target)
            .map_err(|e| internal("cannot bind-mount onto", &target, e))?;
        // Private, so the mount does not travel back to the data directory.
        let _ = rustix::mount::mount_change(&target, MountPropagationFlags::PRIVATE);
        if request.readonly {
            rustix::mount::mount_remount(&target, MountFlags::BIND | MountFlags::RDONLY, "")
                .map_err(|e| internal("cannot make read-only", &target, e))?;
        }
        Ok(())
    }

    /// `NodeUnpublishVolume`: the target unmounted and removed; an inline
    /// volume's data removed.
    pub(crate) fn unpublish(
        &self,
        request: &csi::NodeUnpublishVolumeRequest,
    ) -> Result<(), Status> {
        let id = required(&request.volume_id, "volume ID")?;
        let target = PathBuf::from(required(&request.target_path, "target path")?);
        if is_mount_point(&target) {
            rustix::mount::unmount(&target, UnmountFlags::empty())
                .map_err(|e| internal("cannot unmount", &target, e))?;
        }
        match std::fs::remove_dir(&target) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(internal("cannot remove", &target, e));
            }
            _ => {}
        }
        let mark = self.ephemeral_mark(id);
        if mark.exists() {
            // An inline volume: gone with its pod.
            let dir = self.data_dir(id);
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(internal("cannot remove", &dir, e));
                }
                _ => {}
            }
            let _ = std::fs::remove_file(&mark);
        }
        Ok(())
    }

    /// `NodeExpandVolume`: a volume the driver has, published at the path,
    /// takes the size asked (a directory has no size of its own: the size
    /// is recorded beside its data, `<volume>.size`, and answered).
    pub(crate) fn expand(&self, request: &csi::NodeExpandVolumeRequest) -> Result<i64, Status> {
        let id = required(&request.volume_id, "volume ID")?;
        let path = PathBuf::from(required(&request.volume_path, "volume path")?);
        let data = self.data_dir(id);
        if !data.is_dir() {
            return Err(Status::not_found(format!("volume {id} not found")));
        }
        if !path.is_dir() {
            return Err(Status::not_found(format!(
                "volume path {} does not exist",
                path.display()
            )));
        }
        let bytes = request
            .capacity_range
            .as_ref()
            .map(|c| c.required_bytes)
            .unwrap_or(0);
        if bytes < 0 {
            return Err(Status::out_of_range(format!(
                "required bytes {bytes} is negative"
            )));
        }
        let size = self.state_dir.join(format!("{}.size", file_name(id)));
        std::fs::write(&size, bytes.to_string()).map_err(|e| internal("cannot write", &size, e))?;
        Ok(bytes)
    }

    /// `NodeGetVolumeStats`: the file system's bytes and inodes under the
    /// path.
    pub(crate) fn stats(
        &self,
        request: &csi::NodeGetVolumeStatsRequest,
    ) -> Result<Vec<csi::VolumeUsage>, Status> {
        required(&request.volume_id, "volume ID")?;
        let path = PathBuf::from(required(&request.volume_path, "volume path")?);
        if !path.exists() {
            return Err(Status::not_found(format!(
                "{} does not exist",
                path.display()
            )));
        }
        let fs = rustix::fs::statvfs(&path).map_err(|e| internal("cannot stat", &path, e))?;
        let block = i64::try_from(fs.f_frsize).unwrap_or(i64::MAX);
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Ok(vec![
            csi::VolumeUsage {
                available: n(fs.f_bavail).saturating_mul(block),
                total: n(fs.f_blocks).saturating_mul(block),
                used: n(fs.f_blocks.saturating_sub(fs.f_bfree)).saturating_mul(block),
                unit: csi::volume_usage::Unit::Bytes as i32,
            },
            csi::VolumeUsage {
                available: n(fs.f_ffree),
                total: n(fs.f_files),
                used: n(fs.f_files.saturating_sub(fs.f_ffree)),
                unit: csi::volume_usage::Unit::Inodes as i32,
            },
        ])
    }
}

//! The device manager's checkpoint: allocations and registered devices,
//! written atomically (temporary file, fsync, rename, fsync of the directory)
//! with a checksum, and verified on load. Every write produces two identical
//! files, the checkpoint and its backup, so damage to one (truncation, a
//! flipped bit) loses nothing: the other is used and the damage reported. A
//! file that fails verification is moved aside, never silently replaced.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::allocation::ContainerAllocation;

/// The checkpoint's file name in the device plugin directory. The kubelet's
/// own file (`kubelet_internal_checkpoint`) has a different format and is left alone.
pub const CHECKPOINT_FILE: &str = "nodeplugins_device_checkpoint";
/// The backup's file name: the same bytes, written right after the checkpoint.
pub const BACKUP_FILE: &str = "nodeplugins_device_checkpoint.backup";
const FORMAT_VERSION: u32 = 1;

/// What the checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointData {
    /// Every container allocation.
    pub allocations: Vec<ContainerAllocation>,
    /// Resource → ids of its healthy devices when last written.
    pub registered_devices: BTreeMap<String, Vec<String>>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    version: u32,
    data: serde_json::Value,
    checksum: u32,
}

/// Why the checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The checkpoint and its backup are both damaged; the checkpoint was
    /// moved to `moved_to` (and a damaged backup beside it).
    #[error(
        "device checkpoint {path:?} is corrupt ({why}) and so is its backup ({backup_why}); moved it to {moved_to:?} and started without it"
    )]
    Corrupt {
        /// The checkpoint.
        path: PathBuf,
        /// What was wrong.
        why: String,
        /// What was wrong with the backup (or that it was missing).
        backup_why: String,
        /// Where the damaged file now is.
        moved_to: PathBuf,
    },
    /// Reading or writing failed.
    #[error("device checkpoint {path:?}: {source}")]
    Io {
        /// The checkpoint.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// FNV-1a, 32 bits.
fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The backup's path for the checkpoint at `path`.
pub fn backup_path(path: &Path) -> PathBuf {
    path.with_file_name(BACKUP_FILE)
}

/// Writes `data` atomically to `path` and to its backup, and makes both
/// durable before returning. Both temporary files are written before either
/// is synced, which lets the file system flush them together; each rename
/// happens only once both are on disk, so a crash leaves each file either
/// whole and old or whole and new.
pub fn write(path: &Path, data: &CheckpointData) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    };
    let bytes = encode(data).map_err(|e| io(std::io::Error::other(e)))?;
    let backup = backup_path(path);
    let staged = [stage(path, &bytes), stage(&backup, &bytes)];
    let mut ready = Vec::with_capacity(staged.len());
    for file in staged {
        let (file, tmp) = file.map_err(io)?;
        file.sync_all().map_err(io)?;
        ready.push(tmp);
    }
    for (tmp, target) in ready.iter().zip([path, backup.as_path()]) {
        std::fs::rename(tmp, target).map_err(io)?;
    }
    sync_parent(path).map_err(io)
}

/// Writes `bytes` to the temporary file beside `path`, unsynced.
fn stage(path: &Path, bytes: &[u8]) -> std::io::Result<(std::fs::File, PathBuf)> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut out = std::fs::File::create(&tmp)?;
    out.write_all(bytes)?;
    Ok((out, tmp))
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames it
/// over `path`. The rename is durable once the directory is synced.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (out, tmp) = stage(path, bytes)?;
    out.sync_all()?;
    drop(out);
    std::fs::rename(&tmp, path)
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir).and_then(|d| d.sync_all()),
        None => Ok(()),
    }
}

/// The file's bytes for `data`: JSON with the format version and the
/// checksum of the data's canonical form.
pub fn encode(data: &CheckpointData) -> Result<Vec<u8>, serde_json::Error> {
    let value = serde_json::to_value(data)?;
    let canonical = serde_json::to_vec(&value)?;
    let file = File {
        version: FORMAT_VERSION,
        checksum: checksum(&canonical),
        data: value,
    };
    serde_json::to_vec_pretty(&file)
}

/// Verifies and parses a checkpoint file's bytes; says what is wrong if
/// anything is.
pub fn decode(bytes: &[u8]) -> Result<CheckpointData, String> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| format!("not a checkpoint: {e}"))?;
    if file.version != FORMAT_VERSION {
        return Err(format!("unknown format version {}", file.version));
    }
    let canonical = serde_json::to_vec(&file.data).map_err(|e| e.to_string())?;
    if checksum(&canonical) != file.checksum {
        return Err("checksum mismatch".into());
    }
    serde_json::from_value(file.data).map_err(|e| format!("bad data: {e}"))
}

/// What [`load`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The allocations and devices to restore.
    pub data: CheckpointData,
    /// Set when the checkpoint was damaged and its backup was used instead:
    /// what was wrong and where the damaged file went.
    pub recovered: Option<String>,
}

/// Reads the checkpoint. A missing checkpoint is an empty one (deleting it is
/// how an operator resets device state). A damaged one is moved aside
/// (`<name>.corrupt-<unix ms>`) and its backup is used if that verifies; the
/// backup is rewritten whenever it differs from a good checkpoint.
pub fn load(path: &Path) -> Result<Loaded, CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(source) => return Err(io(source)),
    };
    let backup = backup_path(path);
    let backup_bytes = match std::fs::read(&backup) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(io(source)),
    };
    match decode(&bytes) {
        Ok(data) => {
            if backup_bytes.as_deref() != Some(bytes.as_slice()) {
                replace_file(&backup, &bytes)
                    .and_then(|()| sync_parent(path))
                    .map_err(io)?;
            }
            Ok(Loaded {
                data,
                recovered: None,
            })
        }
        Err(why) => {
            let moved_to = move_aside(path).map_err(io)?;
            let from_backup = backup_bytes
                .ok_or_else(|| "missing".to_string())
                .and_then(|b| decode(&b).map(|data| (data, b)));
            match from_backup {
                Ok((data, good)) => {
                    replace_file(path, &good)
                        .and_then(|()| sync_parent(path))
                        .map_err(io)?;
                    Ok(Loaded {
                        data,
                        recovered: Some(format!(
                            "device checkpoint {path:?} was corrupt ({why}); moved it to \
                             {moved_to:?} and restored everything from its backup {backup:?}"
                        )),
                    })
                }
                Err(backup_why) => {
                    if backup.exists() {
                        move_aside(&backup).map_err(io)?;
                    }
                    Err(CheckpointError::Corrupt {
                        path: path.to_owned(),
                        why,
                        backup_why,
                        moved_to,
                    })
                }
            }
        }
    }
}

/// Renames a damaged file to `<name>.corrupt-<unix ms>` beside it.
fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = crate::registry::status::unix_ms(std::time::SystemTime::now());
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".corrupt-{stamp}"));
    let moved_to = path.with_file_name(name);
    std::fs::rename(path, &moved_to)?;
    Ok(moved_to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CheckpointData {
        let allocation = ContainerAllocation {
            pod_uid: "uid".into(),
            container: "c".into(),
            resource: "example.com/gpu".into(),
            devices: vec!["a".into()],
            envs: [("K".to_string(), "V".to_string())].into(),
            mounts: vec![],
            device_specs: vec![],
            annotations: BTreeMap::new(),
            cdi_devices: vec!["example.com/gpu=a".into()],
        };
        CheckpointData {
            allocations: vec![allocation],
            registered_devices: [(
                "example.com/gpu".to_string(),
                vec!["a".to_string(), "b".to_string()],
            )]
            .into(),
        }
    }

    #[test]
    fn round_trips_with_an_identical_backup_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        assert_eq!(load(&path).unwrap(), Loaded::default());
        write(&path, &sample()).unwrap();
        assert_eq!(load(&path).unwrap().data, sample());
        assert_eq!(
            std::fs::read(backup_path(&path)).unwrap(),
            std::fs::read(&path).unwrap()
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "only the checkpoint and its backup: {names:?}"
        );
    }

    /// The checkpoint's bytes damaged in the ways a disk or a careless hand
    /// damages files: cut short, emptied, and single bits flipped.
    fn damaged_versions(good: &[u8]) -> Vec<Vec<u8>> {
        let mut damaged = vec![good[..good.len() / 2].to_vec(), Vec::new()];
        for at in [0, good.len() / 3, good.len() / 2, good.len() - 10] {
            let mut flipped = good.to_vec();
            flipped[at] ^= 0x04;
            damaged.push(flipped);
        }
        damaged
    }

    fn corrupt_files(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(".corrupt-"))
            .collect()
    }

    #[test]
    fn a_damaged_checkpoint_is_kept_aside_and_everything_comes_back_from_the_backup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        write(&path, &sample()).unwrap();
        let good = std::fs::read(&path).unwrap();
        for bytes in damaged_versions(&good) {
            std::fs::write(&path, &bytes).unwrap();
            let loaded = load(&path).unwrap();
            assert_eq!(loaded.data, sample(), "nothing is lost");
            let notice = loaded.recovered.expect("the damage is reported");
            assert!(
                notice.contains("restored everything from its backup"),
                "{notice}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                good,
                "the checkpoint is repaired"
            );
            let kept = corrupt_files(dir.path());
            assert_eq!(kept.len(), 1);
            assert_eq!(
                std::fs::read(&kept[0]).unwrap(),
                bytes,
                "the damaged file is kept"
            );
            std::fs::remove_file(&kept[0]).unwrap();
        }
    }

    #[test]
    fn a_damaged_backup_beside_a_good_checkpoint_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        write(&path, &sample()).unwrap();
        let good = std::fs::read(&path).unwrap();
        for bytes in damaged_versions(&good) {
            std::fs::write(backup_path(&path), &bytes).unwrap();
            let loaded = load(&path).unwrap();
            assert_eq!(
                loaded,
                Loaded {
                    data: sample(),
                    recovered: None
                }
            );
            assert_eq!(std::fs::read(backup_path(&path)).unwrap(), good);
        }
        std::fs::remove_file(backup_path(&path)).unwrap();
        load(&path).unwrap();
        assert_eq!(
            std::fs::read(backup_path(&path)).unwrap(),
            good,
            "a missing backup too"
        );
    }

    #[test]
    fn when_both_copies_are_damaged_both_are_kept_aside_and_the_error_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        write(&path, &sample()).unwrap();
        let good = std::fs::read(&path).unwrap();
        let damaged = damaged_versions(&good);
        for (i, bytes) in damaged.iter().enumerate() {
            let other = &damaged[(i + 1) % damaged.len()];
            std::fs::write(&path, bytes).unwrap();
            std::fs::write(backup_path(&path), other).unwrap();
            match load(&path) {
                Err(error @ CheckpointError::Corrupt { .. }) => {
                    assert!(error.to_string().contains("so is its backup"), "{error}");
                }
                // A flip inside a string can still be valid JSON with a matching
                // shape; the checksum must catch it.
                other => panic!("damage not detected: {other:?}"),
            }
            assert!(!path.exists() && !backup_path(&path).exists());
            let mut kept: Vec<Vec<u8>> = corrupt_files(dir.path())
                .iter()
                .map(|p| std::fs::read(p).unwrap())
                .collect();
            kept.sort();
            let mut want = vec![bytes.clone(), other.clone()];
            want.sort();
            assert_eq!(kept, want, "both damaged files are kept as they were");
            for p in corrupt_files(dir.path()) {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
}

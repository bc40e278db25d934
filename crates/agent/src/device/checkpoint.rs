//! The device manager's checkpoint: allocations and registered devices,
//! written atomically (temporary file, fsync, rename, fsync of the directory)
//! with a checksum, and verified on load. A file that fails verification is
//! moved aside and reported, never silently replaced.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::allocation::ContainerAllocation;

/// The checkpoint's file name in the device plugin directory. The kubelet's
/// own file (`kubelet_internal_checkpoint`) has a different format and is left alone.
pub const CHECKPOINT_FILE: &str = "nodeplugins_device_checkpoint";
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
    /// The file exists but is damaged; it was moved to `moved_to`.
    #[error(
        "device checkpoint {path:?} is corrupt ({why}); moved it to {moved_to:?} and started without it"
    )]
    Corrupt {
        /// The checkpoint.
        path: PathBuf,
        /// What was wrong.
        why: String,
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

/// Writes `data` to `path` atomically.
pub fn write(path: &Path, data: &CheckpointData) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    };
    let bytes = encode(data).map_err(|e| io(std::io::Error::other(e)))?;
    let tmp = path.with_extension("tmp");
    let mut out = std::fs::File::create(&tmp).map_err(io)?;
    out.write_all(&bytes).map_err(io)?;
    out.sync_all().map_err(io)?;
    drop(out);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
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

/// Reads the checkpoint; a missing file is an empty checkpoint. A damaged one
/// is moved aside (`<name>.corrupt-<unix ms>`) and reported.
pub fn load(path: &Path) -> Result<CheckpointData, CheckpointError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CheckpointData::default()),
        Err(source) => {
            return Err(CheckpointError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    decode(&bytes).or_else(|why| {
        let stamp = crate::registry::status::unix_ms(std::time::SystemTime::now());
        let moved_to = path.with_extension(format!("corrupt-{stamp}"));
        std::fs::rename(path, &moved_to).map_err(|source| CheckpointError::Io {
            path: path.to_owned(),
            source,
        })?;
        Err(CheckpointError::Corrupt {
            path: path.to_owned(),
            why,
            moved_to,
        })
    })
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
    fn round_trips_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        assert_eq!(load(&path).unwrap(), CheckpointData::default());
        write(&path, &sample()).unwrap();
        assert_eq!(load(&path).unwrap(), sample());
        assert!(!path.with_extension("tmp").exists());
    }

    #[test]
    fn truncation_and_bit_flips_are_detected_and_the_file_is_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        write(&path, &sample()).unwrap();
        let good = std::fs::read(&path).unwrap();
        let mut damaged = vec![good[..good.len() / 2].to_vec()];
        for at in [good.len() / 3, good.len() / 2, good.len() - 10] {
            let mut flipped = good.clone();
            flipped[at] ^= 0x04;
            damaged.push(flipped);
        }
        for bytes in damaged {
            std::fs::write(&path, &bytes).unwrap();
            match load(&path) {
                Err(CheckpointError::Corrupt { moved_to, .. }) => {
                    assert!(!path.exists(), "the damaged file is moved, not replaced");
                    assert_eq!(
                        std::fs::read(&moved_to).unwrap(),
                        bytes,
                        "its content is kept"
                    );
                    std::fs::remove_file(moved_to).unwrap();
                }
                // A flip inside a string can still be valid JSON with a matching
                // shape; the checksum must catch it.
                other => panic!("damage not detected: {other:?}"),
            }
        }
    }
}

//! State that must survive a restart, kept in a file written atomically
//! (temporary file, fsync, rename, fsync of the directory) with a checksum and
//! verified on load. Every write produces two identical files, the checkpoint
//! and its backup, so damage to one (truncation, a flipped bit) loses nothing:
//! the other is used and the damage reported. A file that fails verification
//! is moved aside, never silently replaced.
//!
//! The agent's device allocations and prepared DRA claims, and an SDK DRA
//! driver's prepared claims, are all kept this way, each in its own file and
//! backup; what is wrong with one shows in status as a [`CheckpointProblem`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The version of the file layout `{"version":..,"data":..,"checksum":..}`.
const FORMAT_VERSION: u32 = 1;

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    version: u32,
    data: serde_json::Value,
    checksum: u32,
}

/// Why a checkpoint file's bytes are not a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not the JSON envelope of a checkpoint.
    #[error("not a checkpoint: {0}")]
    NotACheckpoint(#[source] serde_json::Error),
    /// An envelope of a layout this version does not know.
    #[error("unknown format version {0}")]
    UnknownVersion(u32),
    /// The data does not match its checksum.
    #[error("checksum mismatch")]
    ChecksumMismatch,
    /// The data verifies but does not have the expected shape.
    #[error("bad data: {0}")]
    BadData(#[source] serde_json::Error),
}

/// Why the backup could not stand in for a damaged checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum BackupProblem {
    /// There is no backup.
    #[error("missing")]
    Missing,
    /// The backup is damaged too.
    #[error(transparent)]
    Damaged(#[from] DecodeError),
}

/// Why a checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The checkpoint and its backup are both damaged; the checkpoint was
    /// moved to `moved_to` (and a damaged backup beside it).
    #[error(
        "{what} {path:?} is corrupt ({why}) and so is its backup ({backup_why}); moved it to {moved_to:?} and started without it"
    )]
    Corrupt {
        /// Which checkpoint, such as "device checkpoint".
        what: &'static str,
        /// The checkpoint.
        path: PathBuf,
        /// What was wrong.
        #[source]
        why: DecodeError,
        /// What was wrong with the backup.
        backup_why: BackupProblem,
        /// Where the damaged file now is.
        moved_to: PathBuf,
    },
    /// The data could not be turned into bytes.
    #[error("{what} {path:?}: cannot encode: {source}")]
    Encode {
        /// Which checkpoint.
        what: &'static str,
        /// The checkpoint.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The checkpoint and its backup are both damaged; a read changes
    /// nothing, so both are where they were.
    #[error("{what} {path:?} is damaged ({why}) and so is its backup ({backup_why})")]
    Damaged {
        /// Which checkpoint.
        what: &'static str,
        /// The checkpoint.
        path: PathBuf,
        /// What was wrong.
        #[source]
        why: DecodeError,
        /// What was wrong with the backup.
        backup_why: BackupProblem,
    },
    /// Reading or writing failed.
    #[error("{what} {path:?}: {source}")]
    Io {
        /// Which checkpoint.
        what: &'static str,
        /// The checkpoint.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// A damaged checkpoint that was replaced by its good backup at load.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} {path:?} was corrupt ({why}); moved it to {moved_to:?} and restored everything from its backup {backup:?}"
)]
pub struct Recovered {
    /// Which checkpoint.
    pub what: &'static str,
    /// The checkpoint.
    pub path: PathBuf,
    /// What was wrong with it.
    #[source]
    pub why: DecodeError,
    /// Where the damaged file now is.
    pub moved_to: PathBuf,
    /// The backup everything came from.
    pub backup: PathBuf,
}

/// What is wrong with a checkpoint, for status: it could not be loaded, it
/// was repaired from its backup at start, or the last write failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckpointProblem {
    /// Loading failed; the agent started without the checkpoint's contents.
    #[error(transparent)]
    Unreadable(Arc<CheckpointError>),
    /// The checkpoint was damaged and everything came from its backup.
    #[error(transparent)]
    Recovered(Arc<Recovered>),
    /// The last write failed (and no later one succeeded).
    #[error("write: {0}")]
    Write(Arc<CheckpointError>),
}

/// What [`CheckpointFile::load`] found.
#[derive(Debug, Default)]
pub struct Loaded<T> {
    /// The data to restore.
    pub data: T,
    /// Set when the checkpoint was damaged and its backup was used instead.
    pub recovered: Option<Recovered>,
}

/// One checkpoint and its backup.
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    what: &'static str,
    path: PathBuf,
    backup: PathBuf,
}

/// FNV-1a, 32 bits.
fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The file's bytes for `data`: JSON with the format version and the
/// checksum of the data's canonical form.
pub fn encode<T: Serialize>(data: &T) -> Result<Vec<u8>, serde_json::Error> {
    let value = serde_json::to_value(data)?;
    let canonical = serde_json::to_vec(&value)?;
    let envelope = Envelope {
        version: FORMAT_VERSION,
        checksum: checksum(&canonical),
        data: value,
    };
    serde_json::to_vec_pretty(&envelope)
}

/// Verifies and parses a checkpoint file's bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(DecodeError::NotACheckpoint)?;
    if envelope.version != FORMAT_VERSION {
        return Err(DecodeError::UnknownVersion(envelope.version));
    }
    let canonical = serde_json::to_vec(&envelope.data).map_err(DecodeError::BadData)?;
    if checksum(&canonical) != envelope.checksum {
        return Err(DecodeError::ChecksumMismatch);
    }
    serde_json::from_value(envelope.data).map_err(DecodeError::BadData)
}

impl CheckpointFile {
    /// The checkpoint at `path`, with its backup at `backup`; `what` names it
    /// in errors ("device checkpoint").
    pub fn new(what: &'static str, path: impl Into<PathBuf>, backup: impl Into<PathBuf>) -> Self {
        Self {
            what,
            path: path.into(),
            backup: backup.into(),
        }
    }

    /// What it holds, as errors and log lines name it ("device checkpoint").
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The checkpoint's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The backup's path.
    pub fn backup(&self) -> &Path {
        &self.backup
    }

    /// An I/O error about this checkpoint.
    pub fn io(&self, source: std::io::Error) -> CheckpointError {
        CheckpointError::Io {
            what: self.what,
            path: self.path.clone(),
            source,
        }
    }

    /// Writes `data` atomically to the checkpoint and to its backup, and makes
    /// both durable before returning. Both temporary files are written before
    /// either is synced, which lets the file system flush them together; each
    /// rename happens only once both are on disk, so a crash leaves each file
    /// either whole and old or whole and new. The backup is renamed first:
    /// a write that fails (or a crash) between the two renames leaves the
    /// checkpoint as it was, which a read takes over the backup. Each write
    /// stages its own temporary files (named after the process and a
    /// counter), so concurrent writers never take each other's.
    pub fn write<T: Serialize>(&self, data: &T) -> Result<(), CheckpointError> {
        let bytes = encode(data).map_err(|source| CheckpointError::Encode {
            what: self.what,
            path: self.path.clone(),
            source,
        })?;
        let staged = [stage(&self.path, &bytes), stage(&self.backup, &bytes)];
        let mut ready = Vec::with_capacity(staged.len());
        for file in staged {
            let (file, tmp) = file.map_err(|e| self.io(e))?;
            file.sync_all().map_err(|e| self.io(e))?;
            ready.push(tmp);
        }
        let [checkpoint_tmp, backup_tmp] = [&ready[0], &ready[1]];
        for (tmp, target) in [(backup_tmp, &self.backup), (checkpoint_tmp, &self.path)] {
            if let Err(e) = std::fs::rename(tmp, target) {
                for tmp in &ready {
                    let _ = std::fs::remove_file(tmp);
                }
                return Err(self.io(e));
            }
        }
        sync_parent(&self.path).map_err(|e| self.io(e))
    }

    /// Reads the checkpoint without changing anything on disk: for readers
    /// beside a writer. A missing checkpoint is an empty one; a damaged one
    /// is read from its backup if that verifies (the writer, at its next
    /// [`load`](Self::load), moves the damaged file aside and repairs it).
    pub fn read<T: DeserializeOwned + Default>(&self) -> Result<T, CheckpointError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
            Err(source) => return Err(self.io(source)),
        };
        let why = match decode(&bytes) {
            Ok(data) => return Ok(data),
            Err(why) => why,
        };
        let backup_why = match std::fs::read(&self.backup) {
            Ok(good) => match decode(&good) {
                Ok(data) => return Ok(data),
                Err(e) => BackupProblem::Damaged(e),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BackupProblem::Missing,
            Err(source) => return Err(self.io(source)),
        };
        Err(CheckpointError::Damaged {
            what: self.what,
            path: self.path.clone(),
            why,
            backup_why,
        })
    }

    /// Reads the checkpoint as its writer: only the one writer may, and
    /// only while no other writes (at start, or under the writers' lock),
    /// because it repairs what it finds. A missing checkpoint is an empty
    /// one (deleting it is how an operator resets the state). A damaged one
    /// is moved aside (`<name>.corrupt-<unix ms>`) and its backup is used if
    /// that verifies; the backup is rewritten whenever it differs from a
    /// good checkpoint. Temporary files a writer left behind (it crashed
    /// while writing) are removed.
    pub fn load<T: DeserializeOwned + Default>(&self) -> Result<Loaded<T>, CheckpointError> {
        remove_staged(&self.path);
        remove_staged(&self.backup);
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Loaded {
                    data: T::default(),
                    recovered: None,
                });
            }
            Err(source) => return Err(self.io(source)),
        };
        let backup_bytes = match std::fs::read(&self.backup) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(self.io(source)),
        };
        let why = match decode(&bytes) {
            Ok(data) => {
                if backup_bytes.as_deref() != Some(bytes.as_slice()) {
                    replace_file(&self.backup, &bytes)
                        .and_then(|()| sync_parent(&self.path))
                        .map_err(|e| self.io(e))?;
                }
                return Ok(Loaded {
                    data,
                    recovered: None,
                });
            }
            Err(why) => why,
        };
        let moved_to = move_aside(&self.path).map_err(|e| self.io(e))?;
        let from_backup = match backup_bytes {
            None => Err(BackupProblem::Missing),
            Some(good) => decode(&good)
                .map(|data| (data, good))
                .map_err(BackupProblem::Damaged),
        };
        match from_backup {
            Ok((data, good)) => {
                replace_file(&self.path, &good)
                    .and_then(|()| sync_parent(&self.path))
                    .map_err(|e| self.io(e))?;
                Ok(Loaded {
                    data,
                    recovered: Some(Recovered {
                        what: self.what,
                        path: self.path.clone(),
                        why,
                        moved_to,
                        backup: self.backup.clone(),
                    }),
                })
            }
            Err(backup_why) => {
                if self.backup.exists() {
                    move_aside(&self.backup).map_err(|e| self.io(e))?;
                }
                Err(CheckpointError::Corrupt {
                    what: self.what,
                    path: self.path.clone(),
                    why,
                    backup_why,
                    moved_to,
                })
            }
        }
    }
}

/// Counts the temporary files this process stages, so each has a name of
/// its own.
static STAGED: AtomicU64 = AtomicU64::new(0);

/// The prefix of the temporary files staged for `path`: `<name>.tmp-`.
fn staged_prefix(path: &Path) -> std::ffi::OsString {
    let mut prefix = path.file_name().unwrap_or_default().to_os_string();
    prefix.push(".tmp-");
    prefix
}

/// Writes `bytes` to a temporary file of its own beside `path`
/// (`<name>.tmp-<pid>-<n>`), unsynced.
fn stage(path: &Path, bytes: &[u8]) -> std::io::Result<(std::fs::File, PathBuf)> {
    let mut tmp_name = staged_prefix(path);
    let n = STAGED.fetch_add(1, Ordering::Relaxed);
    tmp_name.push(format!("{}-{n}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let staged = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut out| out.write_all(bytes).map(|()| out));
    match staged {
        Ok(out) => Ok((out, tmp)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Removes the temporary files staged for `path` that a writer left.
fn remove_staged(path: &Path) {
    let (Some(dir), prefix) = (path.parent(), staged_prefix(path)) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = prefix.to_string_lossy().into_owned();
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames it
/// over `path`. The rename is durable once the directory is synced.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (out, tmp) = stage(path, bytes)?;
    let done = out.sync_all().and_then(|()| {
        drop(out);
        std::fs::rename(&tmp, path)
    });
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir).and_then(|d| d.sync_all()),
        None => Ok(()),
    }
}

/// Renames a damaged file to `<name>.corrupt-<unix ms>` beside it.
fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".corrupt-{stamp}"));
    let moved_to = path.with_file_name(name);
    std::fs::rename(path, &moved_to)?;
    Ok(moved_to)
}

#[cfg(test)]
mod tests;

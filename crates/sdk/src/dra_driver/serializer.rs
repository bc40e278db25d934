//! Serializing prepare and unprepare calls: not at all, within the process,
//! or across the instances of a rolling update (an exclusive lock on a file
//! in the plugin directory).
//!
//! The file lock is a POSIX record lock (`fcntl(F_SETLKW)` over the whole
//! file), not `flock(2)`: the Go helper locks the same file with an open
//! file description lock (`F_OFD_SETLKW`), and on Linux the two kinds of
//! record lock exclude each other while `flock` and record locks do not. So
//! an instance on the Go helper and one on this SDK serialize their calls
//! during a rolling update from one to the other. A record lock belongs to
//! the process, not the thread, and closing any descriptor of the file
//! releases it, so within the process a mutex is held for as long as a
//! descriptor is open, including by a lock attempt whose call was abandoned.

use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::{FlockOperation, fcntl_lock};
use tonic::Status;

/// The lock file's name in the plugin directory, as the Go helper names it.
pub const SERIALIZE_LOCK_FILE: &str = "serialize.lock";

/// Serializes calls: not at all, within the process, or across processes.
pub(super) enum Serializer {
    None,
    Process(tokio::sync::Mutex<()>),
    File {
        /// Held while this process has the file open, so that its calls
        /// take the file lock one at a time.
        process: Arc<tokio::sync::Mutex<()>>,
        path: PathBuf,
    },
}

/// Held while a serialized call runs.
pub(super) enum SerialGuard<'a> {
    None,
    Process(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>),
    File {
        // Dropped in order: the file first (closing it releases the record
        // lock), then the mutex.
        #[allow(dead_code)]
        file: std::fs::File,
        #[allow(dead_code)]
        process: tokio::sync::OwnedMutexGuard<()>,
    },
}

impl Serializer {
    /// A serializer locking the file at `path` across processes.
    pub(super) fn file(path: PathBuf) -> Self {
        Self::File {
            process: Arc::new(tokio::sync::Mutex::new(())),
            path,
        }
    }

    pub(super) async fn acquire(&self) -> Result<SerialGuard<'_>, Status> {
        match self {
            Self::None => Ok(SerialGuard::None),
            Self::Process(mutex) => Ok(SerialGuard::Process(mutex.lock().await)),
            Self::File { process, path } => {
                let process = process.clone().lock_owned().await;
                let path = path.clone();
                // The mutex goes with the file: a call abandoned while it
                // waits for the lock keeps the mutex until its file is
                // closed, which unlocks it.
                let (file, process) = tokio::task::spawn_blocking(move || {
                    let file = std::fs::OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(&path)?;
                    fcntl_lock(&file, FlockOperation::LockExclusive)?;
                    Ok::<_, std::io::Error>((file, process))
                })
                .await
                .map_err(|e| Status::internal(format!("serialize lock: {e}")))?
                .map_err(|e| Status::internal(format!("serialize lock: {e}")))?;
                Ok(SerialGuard::File { file, process })
            }
        }
    }
}

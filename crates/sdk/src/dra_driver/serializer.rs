//! Serializing prepare and unprepare calls: not at all, within the process,
//! or across the instances of a rolling update (an exclusive lock on a file
//! in the plugin directory).

use std::path::PathBuf;

use tonic::Status;

/// Serializes calls: not at all, within the process, or across processes.
pub(super) enum Serializer {
    None,
    Process(tokio::sync::Mutex<()>),
    Flock(PathBuf),
}

/// Held while a serialized call runs.
pub(super) enum SerialGuard<'a> {
    None,
    Process(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>),
    Flock(#[allow(dead_code)] std::fs::File),
}

impl Serializer {
    pub(super) async fn acquire(&self) -> Result<SerialGuard<'_>, Status> {
        match self {
            Self::None => Ok(SerialGuard::None),
            Self::Process(mutex) => Ok(SerialGuard::Process(mutex.lock().await)),
            Self::Flock(path) => {
                let path = path.clone();
                // Dropping the file (also when this call is abandoned) unlocks it.
                let locked = tokio::task::spawn_blocking(move || {
                    let file = std::fs::OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(&path)?;
                    file.lock()?;
                    Ok::<_, std::io::Error>(file)
                })
                .await
                .map_err(|e| Status::internal(format!("serialize lock: {e}")))?
                .map_err(|e| Status::internal(format!("serialize lock: {e}")))?;
                Ok(SerialGuard::Flock(locked))
            }
        }
    }
}

//! Binding a Unix listening socket with the hygiene node plugins expect: a
//! length check, stale-socket removal that never touches a live server or a
//! non-socket, requested permissions, and removal on drop.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use super::TransportError;

/// The longest socket path Linux accepts: `sun_path` is 108 bytes including the NUL.
pub const MAX_SOCKET_PATH_LEN: usize = 107;

/// How long a probe of an existing socket may take before it counts as live.
const LIVENESS_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Checks that `path` fits in `sun_path`.
pub fn check_socket_path(path: &Path) -> Result<(), TransportError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_LEN {
        return Err(TransportError::PathTooLong {
            path: path.to_owned(),
            len,
            max: MAX_SOCKET_PATH_LEN,
        });
    }
    Ok(())
}

/// A bound, listening Unix socket; its file is removed when this is dropped,
/// unless another server has since replaced it.
#[derive(Debug)]
pub struct BoundSocket {
    listener: UnixListener,
    file: SocketFile,
}

impl BoundSocket {
    /// Binds `path`. An existing socket there is removed only when nothing
    /// answers on it; a live one gives [`TransportError::InUse`] and a
    /// non-socket [`TransportError::NotASocket`]. `mode` sets the socket's
    /// permission bits (such as `0o600`). When this returns the socket accepts
    /// connections: that is the readiness signal.
    pub async fn bind(path: impl Into<PathBuf>, mode: Option<u32>) -> Result<Self, TransportError> {
        let path = path.into();
        check_socket_path(&path)?;
        remove_stale(&path).await?;
        let listener = UnixListener::bind(&path).map_err(|source| TransportError::Bind {
            path: path.clone(),
            source,
        })?;
        let file = SocketFile::record(path.clone()).map_err(|source| TransportError::Bind {
            path: path.clone(),
            source,
        })?;
        if let Some(mode) = mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(
                |source| TransportError::Permissions {
                    path: path.clone(),
                    mode,
                    source,
                },
            )?;
        }
        Ok(Self { listener, file })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Splits into the listener and the guard that removes the file.
    pub fn into_parts(self) -> (UnixListener, SocketFile) {
        (self.listener, self.file)
    }
}

/// Removes a socket file on drop if it is still the one we created (same
/// device and inode), so a stopping server never deletes its successor's socket.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    identity: (u64, u64),
}

impl SocketFile {
    fn record(path: PathBuf) -> std::io::Result<Self> {
        let meta = std::fs::symlink_metadata(&path)?;
        Ok(Self {
            path,
            identity: (meta.dev(), meta.ino()),
        })
    }

    /// The path this guard removes.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.identity => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(socket = %self.path.display(), error = %e, "cannot remove socket");
                }
            }
            _ => {}
        }
    }
}

async fn remove_stale(path: &Path) -> Result<(), TransportError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(TransportError::StaleSocket {
                path: path.to_owned(),
                source,
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(TransportError::NotASocket {
            path: path.to_owned(),
        });
    }
    match tokio::time::timeout(LIVENESS_PROBE_TIMEOUT, UnixStream::connect(path)).await {
        Ok(Ok(_)) | Err(_) => Err(TransportError::InUse {
            path: path.to_owned(),
        }),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            match std::fs::remove_file(path) {
                Ok(()) => {
                    tracing::info!(socket = %path.display(), "removed stale socket");
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(TransportError::StaleSocket {
                    path: path.to_owned(),
                    source,
                }),
            }
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(Err(source)) => Err(TransportError::StaleSocket {
            path: path.to_owned(),
            source,
        }),
    }
}

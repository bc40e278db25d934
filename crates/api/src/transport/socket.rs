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

/// How many times a socket whose file another process removes right after
/// it is bound is bound again before binding fails.
const REBINDS: u32 = 3;

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
        Self::bind_between(path.into(), mode, |_| {}).await
    }

    /// [`BoundSocket::bind`], running `between` after each bind and before
    /// its file is recorded: the moment another process (a kubelet
    /// cleaning its plugin directory on start) may remove it. A file
    /// removed then is bound again, up to [`REBINDS`] times.
    async fn bind_between(
        path: PathBuf,
        mode: Option<u32>,
        mut between: impl FnMut(&Path),
    ) -> Result<Self, TransportError> {
        check_socket_path(&path)?;
        let bind_error = |source| TransportError::Bind {
            path: path.clone(),
            source,
        };
        let mut rebinds = 0;
        loop {
            remove_stale(&path).await?;
            let listener = UnixListener::bind(&path).map_err(bind_error)?;
            between(&path);
            let file = match SocketFile::record(path.clone()) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && rebinds < REBINDS => {
                    rebinds += 1;
                    tracing::info!(socket = %path.display(), "socket removed right after it was bound; binding it again");
                    continue;
                }
                Err(source) => return Err(bind_error(source)),
            };
            if let Some(mode) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(
                    |source| TransportError::Permissions {
                        path: path.clone(),
                        mode,
                        source,
                    },
                )?;
            }
            return Ok(Self { listener, file });
        }
    }

    /// The device and inode of the socket's file as bound: a file at the
    /// path with another identity (or none) is not this socket's.
    pub fn identity(&self) -> (u64, u64) {
        self.file.identity
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

#[cfg(test)]
mod tests {
    //! A socket file removed the moment after it is bound, as a kubelet
    //! cleaning its plugin directory on start removes it.

    // Test code: a failed unwrap is a failed test with a precise location.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn a_socket_removed_right_after_it_is_bound_is_bound_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugin.sock");
        let mut removed = 0;
        let bound = BoundSocket::bind_between(path.clone(), Some(0o600), |path| {
            if removed == 0 {
                std::fs::remove_file(path).unwrap();
            }
            removed += 1;
        })
        .await
        .unwrap();
        assert_eq!(removed, 2, "bound twice");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!((meta.dev(), meta.ino()), bound.identity());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        UnixStream::connect(&path)
            .await
            .expect("the socket at the path is the one listening");
    }

    #[tokio::test]
    async fn a_socket_removed_every_time_it_is_bound_fails_to_bind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugin.sock");
        let mut binds = 0;
        let error = BoundSocket::bind_between(path.clone(), None, |path| {
            binds += 1;
            std::fs::remove_file(path).unwrap();
        })
        .await
        .unwrap_err();
        assert_eq!(binds, REBINDS + 1);
        assert!(
            matches!(&error, TransportError::Bind { path: p, source } if *p == path && source.kind() == std::io::ErrorKind::NotFound),
            "{error:?}"
        );
    }
}

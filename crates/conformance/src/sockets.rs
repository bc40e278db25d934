//! Finding a plugin's registration socket as the kubelet's plugin watcher
//! would: a socket file that accepts connections.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Waits up to `timeout` for a registration socket that accepts
/// connections: `path` itself, or the first to appear in the directory
/// `path`.
pub(crate) async fn find_socket(path: &Path, timeout: Duration) -> Result<PathBuf, String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(found) = socket_in(path) {
            return Ok(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "no registration socket at {} within {timeout:?}",
                path.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits up to `timeout` for a socket in the directory `dir` other than
/// `known`.
pub(crate) async fn another_socket(dir: &Path, known: &Path, timeout: Duration) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let found = std::fs::read_dir(dir).ok().and_then(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
                .map(|e| e.path())
                .find(|p| p != known && accepting(p))
        });
        if found.is_some() || tokio::time::Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a socket file accepts connections yet: a server binds (making
/// the file) before it listens, and a connection in between is refused.
pub(crate) fn accepting(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

fn socket_in(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).ok()?;
    if meta.file_type().is_socket() {
        return accepting(path).then(|| path.to_owned());
    }
    if !meta.is_dir() {
        return None;
    }
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| accepting(p))
        .collect();
    sockets.sort();
    sockets.into_iter().next()
}

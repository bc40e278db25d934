//! Sockets the agent serves (`kubelet.sock`, the admin socket) come back when
//! someone deletes them: without `kubelet.sock` no device plugin could ever
//! register again. A server binds its socket, then waits for its removal
//! beside serving; when the file at its path is no longer the socket it bound
//! (deleted, moved away, replaced, or its directory removed), it logs a
//! warning naming the socket, counts it, and binds again.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use std::time::Duration;

use inotify::WatchMask;
use nodeplugins_api::transport::{BoundSocket, TransportError, serve};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;

use crate::fs_watch::{FsWatch, FsWatcher};
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::Retry;
use nodeplugins_api::timer::sleep_until;
use tokio::time::Instant;

/// Device and inode of a file.
pub(crate) type FileIdentity = (u64, u64);

/// What status shows of a served socket.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SocketStatus {
    /// The socket's path.
    pub path: PathBuf,
    /// Whether a socket is at the path now.
    pub present: bool,
    /// How many times it was re-created after being removed.
    pub recreated: u64,
}

impl SocketStatus {
    /// The status of the socket at `path`, re-created `recreated` times.
    pub(crate) fn of(path: &Path, recreated: u64) -> Self {
        Self {
            path: path.to_owned(),
            present: std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()),
            recreated,
        }
    }
}

/// The identity of the file at `path`.
pub(crate) fn identity(path: &Path) -> Option<FileIdentity> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Resolves once the file at `path` is no longer `bound` (the socket this
/// process bound there). Waits with `watcher` on the socket's name and its
/// directory; if the wait cannot be set up it says so and never resolves.
pub(crate) async fn removed(watcher: &FsWatcher, path: &Path, bound: Option<FileIdentity>) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return std::future::pending().await;
    };
    let mask = WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF;
    let mut watch = match watcher.watch(dir, Some(name), mask) {
        Ok(watch) => Some(watch),
        Err(e) => {
            tracing::warn!(socket = %path.display(), error = %e,
                "cannot watch the socket's directory; a removed socket will not be re-created");
            return std::future::pending().await;
        }
    };
    // The watch exists now: anything from here on is seen.
    while identity(path) == bound {
        FsWatch::fired(&mut watch).await;
    }
}

/// The first retry after a removed socket could not be bound again.
const REBIND_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between attempts to bind a removed socket again.
const REBIND_MAX: Duration = Duration::from_secs(10);

/// Binds the removed socket at `path` again with `bind`, retrying with
/// backoff (the agent keeps running, and says what is wrong) until it
/// succeeds; `None` at shutdown.
pub(crate) async fn bind_again<F, Fut>(
    path: &Path,
    mut bind: F,
    shutdown: &CancellationToken,
) -> Option<BoundSocket>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<BoundSocket, TransportError>>,
{
    let schedule = Backoff::new(REBIND_INITIAL, REBIND_MAX);
    let mut retry: Retry<String> = Retry::default();
    loop {
        let error = match bind().await {
            Ok(socket) => return Some(socket),
            Err(e) => e.to_string(),
        };
        retry.failed(error.clone(), &schedule, Instant::now());
        let delay = retry.due().map(|d| d.delay).unwrap_or_default();
        tracing::error!(socket = %path.display(), %error, retry_in = ?delay,
            "cannot serve the socket again; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = sleep_until(retry.due_at()) => {}
        }
    }
}

/// Serves the gRPC services of `router()` on `socket` until `shutdown`, and
/// serves them again, on a socket from `bind`, whenever the file is removed
/// (`watcher` notices);
/// `recreated` is called each time. `what` names the socket in logs.
pub(crate) async fn serve_grpc<B, BF>(
    watcher: &FsWatcher,
    mut socket: BoundSocket,
    mut bind: B,
    router: impl Fn() -> Router,
    what: &str,
    recreated: impl Fn(),
    shutdown: CancellationToken,
) -> Result<(), TransportError>
where
    B: FnMut() -> BF,
    BF: Future<Output = Result<BoundSocket, TransportError>>,
{
    loop {
        let path = socket.path().to_owned();
        let bound = identity(&path);
        let round = shutdown.child_token();
        tracing::info!(socket = %path.display(), "serving the {what}");
        let serving = serve(socket, router(), round.clone());
        tokio::pin!(serving);
        tokio::select! {
            served = &mut serving => return served,
            () = removed(watcher, &path, bound) => {}
        }
        tracing::warn!(socket = %path.display(), "the {what} socket was removed; serving it again");
        recreated();
        round.cancel();
        let _ = serving.await;
        socket = match bind_again(&path, &mut bind, &shutdown).await {
            Some(socket) => socket,
            None => return Ok(()),
        };
    }
}

/// Creates `dir` (and its parents) and gives it `mode`, whatever it had.
/// A `dir` that is a symbolic link (an operator linking the directory
/// elsewhere) is used as it is: the mode of the directory it points to is
/// the operator's, not ours to change.
pub(crate) fn create_dir_with_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    if std::fs::symlink_metadata(dir)?.file_type().is_symlink() {
        tracing::info!(dir = %dir.display(), mode = format!("{mode:04o}"),
            "the directory is a symbolic link: its target's permissions are left as they are");
        return Ok(());
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn an_existing_directory_gets_the_mode_but_a_linked_ones_target_keeps_its_own() {
        let root = tempfile::tempdir().unwrap();
        let created = root.path().join("new/pod-resources");
        create_dir_with_mode(&created, 0o700).unwrap();
        assert_eq!(mode(&created), 0o700);

        let existing = root.path().join("existing");
        std::fs::create_dir(&existing).unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir_with_mode(&existing, 0o700).unwrap();
        assert_eq!(
            mode(&existing),
            0o700,
            "an existing directory is made private"
        );

        let target = root.path().join("shared");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = root.path().join("linked");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        create_dir_with_mode(&link, 0o700).unwrap();
        assert_eq!(mode(&target), 0o755, "the link's target is left as it is");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}

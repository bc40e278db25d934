// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::net::UnixListener;
use std::time::Duration;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Waits for `watch` to fire, failing the test after [`TIMEOUT`].
async fn fired(watch: &mut Option<FsWatch>) {
    tokio::time::timeout(TIMEOUT, FsWatch::fired(watch))
        .await
        .expect("the watch to fire");
}

#[tokio::test]
async fn more_waiting_sockets_than_the_users_inotify_instances_each_get_a_watch_that_fires() {
    // The default per-user limit is 128 instances; one each would fail here.
    let watcher = FsWatcher::new();
    let root = tempfile::tempdir().unwrap();
    let mut waiting = Vec::new();
    for i in 0..300 {
        let dir = root.path().join(format!("driver-{i}"));
        std::fs::create_dir(&dir).unwrap();
        let socket = dir.join("dra.sock");
        let watch = socket_watch(&watcher, &socket);
        assert!(watch.is_some(), "no watch for instance {i}");
        waiting.push((socket, watch));
    }
    assert_eq!(watcher.watched_dirs(), 300);
    for (socket, watch) in &mut waiting {
        let _listener = UnixListener::bind(&*socket).unwrap();
        fired(watch).await;
    }
    drop(waiting);
    assert_eq!(
        watcher.watched_dirs(),
        0,
        "the last watch on a directory removes it"
    );
    tokio::time::timeout(TIMEOUT, watcher.stopped())
        .await
        .expect("the reader to end once no wait is left");
}

#[tokio::test]
async fn a_watch_fires_for_its_own_name_only_and_shares_the_directory_with_others() {
    let watcher = FsWatcher::new();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.sock");
    let b = dir.path().join("b.sock");
    let mut watch_a = socket_watch(&watcher, &a);
    let mut watch_b = socket_watch(&watcher, &b);
    assert_eq!(watcher.watched_dirs(), 1, "one watch for the directory");

    let _listener = UnixListener::bind(&b).unwrap();
    fired(&mut watch_b).await;
    // `a` was not woken by `b`: its first wake-up is its own socket's.
    let _listener = UnixListener::bind(&a).unwrap();
    fired(&mut watch_a).await;
    assert!(
        watch_a.as_mut().unwrap().woken.try_recv().is_err(),
        "woken once, by its own name"
    );

    drop(watch_b);
    assert_eq!(watcher.watched_dirs(), 1, "still watched for `a`");
    drop(watch_a);
    assert_eq!(watcher.watched_dirs(), 0);
}

#[tokio::test]
async fn a_creation_while_nobody_waits_is_kept_for_the_next_wait() {
    let watcher = FsWatcher::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("dra.sock");
    let mut watch = socket_watch(&watcher, &socket);
    std::fs::write(&socket, b"").unwrap();
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, b"").unwrap();
    fired(&mut watch).await;
    assert!(watch.is_some());
}

#[tokio::test]
async fn a_removed_directory_breaks_its_watches_and_a_later_watch_works_again() {
    let watcher = FsWatcher::new();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("driver");
    std::fs::create_dir(&dir).unwrap();
    let socket = dir.join("dra.sock");
    let mut watch = socket_watch(&watcher, &socket);
    std::fs::remove_dir(&dir).unwrap();
    // The kernel drops the directory's watch; the hub forgets it.
    let woken = tokio::time::timeout(TIMEOUT, watch.as_mut().unwrap().woken.recv())
        .await
        .expect("the watch to break");
    assert!(woken.is_none(), "the watch broke");
    assert_eq!(watcher.watched_dirs(), 0);

    std::fs::create_dir(&dir).unwrap();
    let mut again = socket_watch(&watcher, &socket);
    let _listener = UnixListener::bind(&socket).unwrap();
    fired(&mut again).await;
}

#[tokio::test]
async fn waits_with_other_masks_share_a_directory_and_each_gets_its_own_events() {
    let watcher = FsWatcher::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    std::fs::write(&socket, b"").unwrap();
    let name = Some(socket.file_name().unwrap());
    let mut created = Some(watcher.watch(dir.path(), name, WatchMask::CREATE).unwrap());
    let mut removed = Some(watcher.watch(dir.path(), name, WatchMask::DELETE).unwrap());
    let mut any = Some(
        watcher
            .watch_dirs([dir.path()], WatchMask::CLOSE_WRITE)
            .unwrap(),
    );
    assert_eq!(watcher.watched_dirs(), 1);

    std::fs::remove_file(&socket).unwrap();
    fired(&mut removed).await;
    std::fs::write(&socket, b"").unwrap();
    fired(&mut created).await;
    fired(&mut any).await;
    assert!(
        removed.as_mut().unwrap().woken.try_recv().is_err(),
        "a creation does not wake a wait for removals"
    );
    std::fs::write(dir.path().join("other"), b"").unwrap();
    fired(&mut any).await;
    assert!(
        created.as_mut().unwrap().woken.try_recv().is_err(),
        "another name does not wake a wait for this one"
    );
}

/// A wait for `socket`'s creation, as a DRA instance waits.
fn socket_watch(watcher: &FsWatcher, socket: &std::path::Path) -> Option<FsWatch> {
    let mask = WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ATTRIB;
    watcher
        .watch(socket.parent().unwrap(), socket.file_name(), mask)
        .ok()
}

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(10);

fn file(path: &std::path::Path) -> CheckpointFile {
    CheckpointFile::new(
        "test checkpoint",
        path.join("state"),
        path.join("state.backup"),
    )
}

/// Waits for the running write to end and records it.
async fn write_ended<T: Serialize + Send + 'static, U>(
    persister: &mut Persister<T, U>,
    ends: &mut Ends,
) -> Result<(), (Arc<CheckpointError>, Vec<U>)> {
    let written = tokio::time::timeout(TIMEOUT, ends.recv())
        .await
        .expect("the write to end")
        .expect("the writer runs");
    persister.on_written(written)
}

#[tokio::test]
async fn a_burst_of_changes_is_written_newest_last_and_answers_every_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (mut persister, mut ends): (Persister<u32, &str>, _) =
        Persister::start(file(dir.path()), &tasks);
    let mut replies = Vec::new();
    for value in 1..=3 {
        let version = persister.changed();
        let (reply, answered) = oneshot::channel();
        persister.when_written(version, reply, "undo");
        replies.push(answered);
        // Only the first change starts a write; the others wait for it.
        persister.flush(|| value);
    }
    assert!(write_ended(&mut persister, &mut ends).await.is_ok());
    persister.flush(|| 3);
    assert!(write_ended(&mut persister, &mut ends).await.is_ok());
    for answered in replies {
        assert!(answered.await.unwrap().is_ok());
    }
    let on_disk: u32 = file(dir.path()).load().unwrap().data;
    assert_eq!(on_disk, 3);
}

#[tokio::test]
async fn a_failed_write_answers_its_waiters_with_the_error_and_hands_back_their_undo() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no such directory");
    let tasks = TaskTracker::new();
    let (mut persister, mut ends): (Persister<u32, &str>, _) =
        Persister::start(file(&missing), &tasks);
    let first = persister.changed();
    let (reply, answered) = oneshot::channel();
    persister.when_written(first, reply, "undo the first");
    persister.flush(|| 1);
    // A change after the write started waits for the next one.
    let second = persister.changed();
    let (later_reply, later) = oneshot::channel();
    persister.when_written(second, later_reply, "undo the second");

    let Err((error, undo)) = write_ended(&mut persister, &mut ends).await else {
        panic!("the write failed");
    };
    assert_eq!(undo, ["undo the first"], "only the changes that write held");
    assert!(answered.await.unwrap().is_err());
    assert!(
        persister
            .last_error()
            .is_some_and(|e| Arc::ptr_eq(&e, &error))
    );

    std::fs::create_dir(&missing).unwrap();
    persister.flush(|| 2);
    assert!(write_ended(&mut persister, &mut ends).await.is_ok());
    assert!(later.await.unwrap().is_ok());
    assert!(persister.last_error().is_none(), "a later write succeeded");
}

#[tokio::test]
async fn write_out_writes_the_last_change_and_ends_when_none_runs() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (persister, mut ends): (Persister<u32>, _) = Persister::start(file(dir.path()), &tasks);
    let persister = std::sync::Mutex::new(persister);
    let value = std::sync::atomic::AtomicU32::new(1);
    {
        let mut locked = persister.lock().unwrap();
        locked.changed();
        locked.flush(|| 1);
        // Changed again while the first write runs: written by the next.
        locked.changed();
    }
    value.store(2, std::sync::atomic::Ordering::SeqCst);
    let mut ended = 0;
    tokio::time::timeout(
        TIMEOUT,
        write_out(
            &mut ends,
            || {
                let mut locked = persister.lock().unwrap();
                locked.flush(|| value.load(std::sync::atomic::Ordering::SeqCst));
                locked.writing()
            },
            |written| {
                ended += 1;
                assert!(persister.lock().unwrap().on_written(written).is_ok());
            },
        ),
    )
    .await
    .expect("write_out ends");
    assert_eq!(ended, 2, "the running write, then the last change's");
    let on_disk: u32 = file(dir.path()).load().unwrap().data;
    assert_eq!(on_disk, 2);
    drop(persister);
    tasks.close();
    tokio::time::timeout(TIMEOUT, tasks.wait())
        .await
        .expect("the writer stops with its persister");
}

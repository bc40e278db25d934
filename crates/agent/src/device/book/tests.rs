use std::collections::BTreeMap;
use std::path::Path;

use tokio_util::task::TaskTracker;

use super::*;
use crate::device::checkpoint::{self, DeviceCheckpoint};
use crate::published::Store;

const LONG: Duration = Duration::from_secs(10);
const GPU: &str = "example.com/gpu";

fn allocation(pod: &str, device: &str) -> ContainerAllocation {
    ContainerAllocation {
        pod_uid: pod.into(),
        pod_namespace: "ns".into(),
        pod_name: format!("pod-{pod}"),
        container: "main".into(),
        resource: GPU.into(),
        devices: vec![device.into()],
        envs: BTreeMap::new(),
        mounts: Vec::new(),
        device_specs: Vec::new(),
        annotations: BTreeMap::new(),
        cdi_devices: Vec::new(),
        numa: BTreeMap::new(),
    }
}

/// A running book writing its checkpoint in `dir`, with its store and the
/// ends of its writes.
fn running(dir: &Path, tasks: &TaskTracker) -> (DeviceBook, Store<DeviceSnapshot>, Ends) {
    let (publisher, store) = Publisher::new(DeviceSnapshot::default());
    let book = DeviceBook::new(Duration::from_secs(300), broadcast::channel(16).0);
    let (persister, ends) = Persister::start(checkpoint::file(dir), tasks);
    {
        let mut locked = book.lock();
        locked.load(persister, publisher);
        locked.publish();
    }
    (book, store, ends)
}

/// Answers the next write's end, as the manager's task does.
async fn answer_next(book: &DeviceBook, ends: &mut Ends) -> bool {
    let written = tokio::time::timeout(LONG, ends.recv())
        .await
        .expect("a write ends")
        .expect("the writer runs");
    let mut locked = book.lock();
    let changed = locked.on_written(written);
    if changed {
        locked.publish();
    }
    changed
}

fn on_disk(dir: &Path) -> Vec<String> {
    let loaded = checkpoint::file(dir).load::<DeviceCheckpoint>().unwrap();
    loaded
        .data
        .allocations
        .into_iter()
        .map(|a| a.pod_uid)
        .collect()
}

#[tokio::test]
async fn a_commit_is_published_at_once_and_answered_once_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (book, store, mut ends) = running(dir.path(), &tasks);
    assert!(store.get().running());
    let done = book.commit(0, vec![allocation("p1", "gpu-0")]).unwrap();
    assert_eq!(
        store.get().allocations_of("p1").len(),
        1,
        "seen before the write"
    );
    assert!(!answer_next(&book, &mut ends).await);
    done.await.unwrap().unwrap();
    assert_eq!(on_disk(dir.path()), ["p1"]);

    let (released, done) = book.release("p1");
    assert_eq!(released, 1);
    assert!(store.get().allocations_of("p1").is_empty());
    answer_next(&book, &mut ends).await;
    done.expect("a release is written").await.unwrap().unwrap();
    assert!(on_disk(dir.path()).is_empty());
    assert_eq!(book.release("p1").0, 0, "nothing left to release");
}

#[tokio::test]
async fn an_allocation_whose_write_fails_is_undone_and_the_problem_published() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (book, store, mut ends) = running(dir.path(), &tasks);
    // A directory where the checkpoint goes: every write fails to rename.
    let blocked = dir.path().join(checkpoint::CHECKPOINT_FILE);
    std::fs::create_dir_all(blocked.join("in-the-way")).unwrap();
    let done = book.commit(0, vec![allocation("p1", "gpu-0")]).unwrap();
    assert!(
        answer_next(&book, &mut ends).await,
        "the failure changes the state"
    );
    assert!(
        done.await.unwrap().is_err(),
        "the caller hears the write failed"
    );
    let snapshot = store.get();
    assert!(snapshot.allocations_of("p1").is_empty(), "undone");
    assert!(snapshot.checkpoint_problem().is_some());
}

#[tokio::test]
async fn nothing_is_committed_once_the_book_finished() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (book, store, mut ends) = running(dir.path(), &tasks);
    let done = book.commit(0, vec![allocation("p1", "gpu-0")]).unwrap();
    tokio::time::timeout(LONG, book.finish(&mut ends))
        .await
        .expect("finish ends");
    done.await.unwrap().unwrap();
    assert_eq!(on_disk(dir.path()), ["p1"]);
    assert!(matches!(
        book.commit(0, vec![allocation("p2", "gpu-1")]),
        Err(AllocateError::Stopping)
    ));
    assert!(store.get().allocations_of("p2").is_empty());
    tasks.close();
    tokio::time::timeout(LONG, tasks.wait())
        .await
        .expect("the writer ends with the book's persister");
}

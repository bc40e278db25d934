use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use super::*;
use crate::dra::claim::{ClaimPod, ClaimRef, PreparedDevice};
use crate::dra::prepare::checkpoint;

const GPU: &str = "gpu.example.com";
const LONG: Duration = Duration::from_secs(10);

fn claim(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        name: format!("claim-{uid}"),
        uid: uid.into(),
    }
}

fn request(uid: &str, pod: &str) -> ClaimToPrepare {
    ClaimToPrepare {
        claim: claim(uid),
        drivers: vec![GPU.into()],
        user: Some(ClaimPod::new(
            pod,
            format!("pod-{pod}"),
            vec!["main".into()],
        )),
    }
}

fn prepared(uid: &str) -> PreparedClaim {
    PreparedClaim {
        claim: claim(uid),
        devices: vec![PreparedDevice {
            request_names: vec!["req".into()],
            pool: "pool".into(),
            device: format!("gpu-{uid}"),
            cdi_device_ids: vec![format!("example.com/gpu=gpu-{uid}")],
            share_id: None,
        }],
        error: None,
    }
}

/// A book loaded from the checkpoint in `dir`, with a task answering the
/// ends of its writes that counts them.
async fn open(dir: &std::path::Path) -> (Arc<ClaimBook>, watch::Receiver<usize>, TaskTracker) {
    let tasks = TaskTracker::new();
    let (persister, mut ends, loaded) = checkpoint::open(dir, &tasks).await;
    let book = Arc::new(ClaimBook::default());
    book.load(loaded, Some(persister), published().0);
    let (count, writes) = watch::channel(0);
    let answering = book.clone();
    tasks.spawn(async move {
        while let Some(written) = ends.recv().await {
            answering.on_written(written);
            count.send_modify(|n| *n += 1);
        }
    });
    (book, writes, tasks)
}

/// The claim UIDs in the checkpoint in `dir`, and whether each is prepared.
fn on_disk(dir: &std::path::Path) -> Vec<(String, bool)> {
    let loaded = checkpoint::file(dir).load::<DraCheckpoint>().unwrap();
    loaded
        .data
        .claims
        .into_iter()
        .map(|c| (c.claim.uid, c.prepared))
        .collect()
}

/// The channel readers follow the records on.
fn published() -> (
    Publisher<PreparedClaims>,
    watch::Receiver<Arc<PreparedClaims>>,
) {
    let (publisher, store) = Publisher::new(PreparedClaims::default());
    (publisher, store.subscribe())
}

async fn written(done: Option<WriteDone>) {
    let done = done.expect("a change is written");
    tokio::time::timeout(LONG, done)
        .await
        .expect("the write ends")
        .expect("answered")
        .expect("written");
}

#[tokio::test]
async fn a_change_needs_the_book_loaded_and_is_on_disk_when_its_write_answers() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (persister, mut ends, loaded) = checkpoint::open(dir.path(), &tasks).await;
    let book = Arc::new(ClaimBook::default());
    let (sender, mut records) = published();
    assert!(
        book.begin_prepare(&[request("a", "p1")]).is_err(),
        "nothing is recorded before the book is loaded"
    );
    assert!(!records.borrow().is_loaded());
    book.load(loaded, Some(persister), sender);
    assert!(records.borrow_and_update().is_loaded());

    let (plan, done) = book.begin_prepare(&[request("a", "p1")]).unwrap();
    assert_eq!(plan.calls[GPU], [claim("a")]);
    assert!(records.has_changed().unwrap(), "published at once");
    assert!(records.borrow().get(GPU, "a").is_some());
    let answer = tokio::spawn(written(done));
    let end = tokio::time::timeout(LONG, ends.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(!book.on_written(end), "no problem before or after");
    tokio::time::timeout(LONG, answer).await.unwrap().unwrap();
    assert_eq!(
        on_disk(dir.path()),
        [("a".to_string(), false)],
        "pending, before any driver call"
    );

    let done = book.finish_prepare(&[(GPU.into(), vec![prepared("a")])]);
    // The ends were taken above: answered here.
    let end = tokio::time::timeout(LONG, ends.recv())
        .await
        .unwrap()
        .unwrap();
    book.on_written(end);
    written(done).await;
    assert_eq!(on_disk(dir.path()), [("a".to_string(), true)]);
}

#[tokio::test]
async fn changes_made_during_a_write_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let (book, mut writes, _tasks) = open(dir.path()).await;
    let mut waiting = Vec::new();
    for i in 0..50 {
        let (_, done) = book
            .begin_prepare(&[request(&format!("c{i:02}"), &format!("p{i}"))])
            .unwrap();
        waiting.push(written(done));
    }
    futures::future::join_all(waiting).await;
    let count = *writes.borrow_and_update();
    // The first change starts a write; the others wait for it to end and
    // go in one write after it.
    assert!(count <= 2, "50 changes cost {count} writes");
    assert_eq!(on_disk(dir.path()).len(), 50);
}

#[tokio::test]
async fn a_change_that_changes_nothing_waits_for_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let (book, _writes, _tasks) = open(dir.path()).await;
    written(book.begin_prepare(&[request("a", "p1")]).unwrap().1).await;
    written(book.finish_prepare(&[(GPU.into(), vec![prepared("a")])])).await;
    let (plan, done) = book.begin_prepare(&[request("a", "p1")]).unwrap();
    assert!(
        plan.calls.is_empty(),
        "prepared before: answered from the record"
    );
    assert_eq!(plan.recorded.len(), 1);
    assert!(done.is_none());
}

#[tokio::test]
async fn a_claim_being_unprepared_is_refused_until_its_drivers_let_it_go() {
    let dir = tempfile::tempdir().unwrap();
    let (book, _writes, _tasks) = open(dir.path()).await;
    written(book.begin_prepare(&[request("a", "p1")]).unwrap().1).await;
    written(book.finish_prepare(&[(GPU.into(), vec![prepared("a")])])).await;
    // The record stays until its driver unprepared it; only the claim
    // being unprepared is new, which is not on disk.
    let (plan, _) = book.begin_unprepare("p1");
    assert_eq!(plan.calls[GPU], [claim("a")]);
    assert!(
        book.begin_prepare(&[request("a", "p2")]).is_err(),
        "no pod starts using a claim while it is unprepared"
    );
    // The driver failed: the claim stays recorded and being unprepared.
    assert!(
        book.finish_unprepare(&[(GPU.into(), vec![])], &["a".into()])
            .is_none()
    );
    assert!(book.begin_prepare(&[request("a", "p2")]).is_err());
    // It unprepared it: the claim is forgotten and free again.
    written(book.finish_unprepare(&[(GPU.into(), vec!["a".into()])], &["a".into()])).await;
    assert!(on_disk(dir.path()).is_empty());
    let (plan, _) = book.begin_prepare(&[request("a", "p2")]).unwrap();
    assert_eq!(plan.calls[GPU], [claim("a")]);
}

#[tokio::test]
async fn finish_writes_the_last_change_and_then_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let (persister, mut ends, loaded) = checkpoint::open(dir.path(), &tasks).await;
    let book = ClaimBook::default();
    book.load(loaded, Some(persister), published().0);
    let (_, first) = book.begin_prepare(&[request("a", "p1")]).unwrap();
    let (_, second) = book.begin_prepare(&[request("b", "p2")]).unwrap();
    tokio::time::timeout(LONG, book.finish(&mut ends))
        .await
        .expect("finish ends");
    written(first).await;
    written(second).await;
    assert_eq!(on_disk(dir.path()).len(), 2);
    let (_, after) = book.begin_prepare(&[request("c", "p3")]).unwrap();
    assert!(after.is_none(), "nothing is written after finish");
    tasks.close();
    tokio::time::timeout(LONG, tasks.wait())
        .await
        .expect("the writer ends with the book's persister");
}

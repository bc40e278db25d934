// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const LOG: &str = "\
2024-05-01T10:00:00.000000001Z stdout F one
2024-05-01T10:00:01.5Z stderr F two
2024-05-01T10:00:02Z stdout P thr
2024-05-01T10:00:03Z stdout F ee
2024-05-01T10:00:04+02:00 stdout F four
";

async fn read(content: &str, options: LogOptions) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, content).unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let watcher = FsWatcher::new();
    read_logs(&path, options, &watcher, || async { false }, tx)
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = rx.recv().await {
        out.extend_from_slice(&chunk);
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn parts_join_into_one_line_and_each_full_line_gets_its_newline() {
    let out = read(LOG, LogOptions::default()).await;
    assert_eq!(out, "one\ntwo\nthree\nfour\n");
}

#[tokio::test]
async fn timestamps_go_before_each_logical_line_with_nine_digits_in_the_lines_zone() {
    let options = LogOptions {
        timestamps: true,
        ..LogOptions::default()
    };
    let out = read(LOG, options).await;
    assert_eq!(
        out,
        "2024-05-01T10:00:00.000000001Z one\n\
         2024-05-01T10:00:01.500000000Z two\n\
         2024-05-01T10:00:02.000000000Z three\n\
         2024-05-01T10:00:04.000000000+02:00 four\n"
    );
}

#[tokio::test]
async fn tail_counts_the_files_lines_from_the_end() {
    let tail = |n| LogOptions {
        tail: Some(n),
        ..LogOptions::default()
    };
    assert_eq!(read(LOG, tail(1)).await, "four\n");
    assert_eq!(read(LOG, tail(2)).await, "ee\nfour\n");
    assert_eq!(read(LOG, tail(0)).await, "");
    assert_eq!(read(LOG, tail(100)).await, "one\ntwo\nthree\nfour\n");
}

#[tokio::test]
async fn since_skips_older_lines() {
    let options = LogOptions {
        since: Some("2024-05-01T10:00:01.5Z".parse().unwrap()),
        ..LogOptions::default()
    };
    // 10:00:04+02:00 is 08:00:04Z: older.
    assert_eq!(read(LOG, options).await, "two\nthree\n");
}

#[tokio::test]
async fn limit_bytes_cuts_the_output_and_stops() {
    let options = LogOptions {
        limit_bytes: Some(6),
        ..LogOptions::default()
    };
    assert_eq!(read(LOG, options).await, "one\ntw");
}

#[tokio::test]
async fn the_docker_json_format_is_read_when_the_first_line_is_in_it() {
    let content = "{\"log\":\"a\\n\",\"stream\":\"stdout\",\"time\":\"2024-05-01T10:00:00Z\"}\n\
                   {\"log\":\"b\\n\",\"stream\":\"stderr\",\"time\":\"2024-05-01T10:00:01Z\"}\n";
    assert_eq!(read(content, LogOptions::default()).await, "a\nb\n");
}

#[tokio::test]
async fn a_line_in_no_format_is_skipped() {
    let content = "2024-05-01T10:00:00Z stdout F a\ngarbage\n2024-05-01T10:00:01Z stdout F b\n";
    assert_eq!(read(content, LogOptions::default()).await, "a\nb\n");
}

async fn next_text(rx: &mut mpsc::Receiver<Bytes>) -> String {
    let chunk = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("more output in time")
        .expect("the reader still runs");
    String::from_utf8(chunk.to_vec()).unwrap()
}

#[tokio::test]
async fn follow_gives_what_is_appended_reads_a_rotated_file_and_ends_with_the_container() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, "2024-05-01T10:00:00Z stdout F first\n").unwrap();
    let running = Arc::new(AtomicBool::new(true));
    let (tx, mut rx) = mpsc::channel(64);
    let reader = {
        let path = path.clone();
        let running = running.clone();
        tokio::spawn(async move {
            let watcher = FsWatcher::new();
            let options = LogOptions {
                follow: true,
                ..LogOptions::default()
            };
            let running = move || {
                let running = running.clone();
                async move { running.load(Ordering::SeqCst) }
            };
            read_logs(&path, options, &watcher, running, tx).await
        })
    };
    assert_eq!(next_text(&mut rx).await, "first\n");

    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"2024-05-01T10:00:01Z stdout F second\n")
        .unwrap();
    assert_eq!(next_text(&mut rx).await, "second\n");

    // Rotation: the file renamed away and a new one made in its place.
    std::fs::rename(&path, dir.path().join("0.log.20240501-100002")).unwrap();
    std::fs::write(&path, "2024-05-01T10:00:03Z stdout F third\n").unwrap();
    assert_eq!(next_text(&mut rx).await, "third\n");

    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"2024-05-01T10:00:04Z stdout F last\n")
        .unwrap();
    assert_eq!(next_text(&mut rx).await, "last\n");

    // The container stops; a write wakes the reader if it waits at the
    // end. Whether it reads that line first depends on when it last
    // looked at the container (as the kubelet's, which checks before each
    // wait): either way it ends.
    running.store(false, Ordering::SeqCst);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"2024-05-01T10:00:05Z stdout F after\n")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the reader ends once the container stopped")
        .unwrap()
        .unwrap();
    let mut rest = String::new();
    while let Ok(chunk) = rx.try_recv() {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        rest.is_empty() || rest == "after\n",
        "only the line written as the container stopped may follow: {rest:?}"
    );
}

#[test]
fn tail_start_ignores_the_final_newline() {
    assert_eq!(tail_start(b"a\nb\nc\n", 1), 4);
    assert_eq!(tail_start(b"a\nb\nc", 1), 4);
    assert_eq!(tail_start(b"a\nb\nc\n", 3), 0);
    assert_eq!(tail_start(b"", 3), 0);
}

#[tokio::test]
async fn a_tail_gives_its_count_of_lines_even_when_the_file_grew_after_it_was_measured() {
    // The lines from the tail's start on, as the reader meets them: the
    // two measured and one appended while they were read.
    let (tx, mut rx) = mpsc::channel(8);
    let mut writer = Writer {
        options: LogOptions {
            tail: Some(2),
            ..LogOptions::default()
        },
        format: None,
        at_line_start: true,
        written: 0,
        lines_left: Some(2),
        out: tx,
    };
    let lines = [
        "2024-05-01T10:00:03Z stdout F ee",
        "not a line",
        "2024-05-01T10:00:04Z stdout F four",
        "2024-05-01T10:00:05Z stdout F appended",
    ];
    assert!(writer.line(lines[0].as_bytes()).await.is_ok());
    assert!(
        writer.line(lines[1].as_bytes()).await.is_ok(),
        "an unparsed line does not count"
    );
    assert!(
        writer.line(lines[2].as_bytes()).await.is_err(),
        "the second line is the tail's last"
    );
    drop(writer);
    let mut out = String::new();
    while let Some(chunk) = rx.recv().await {
        out.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert_eq!(out, "ee\nfour\n");
}

#[tokio::test]
async fn lines_since_skips_count_toward_the_tail() {
    let options = LogOptions {
        tail: Some(2),
        since: Some("2024-05-01T10:00:02Z".parse().unwrap()),
        ..LogOptions::default()
    };
    let log = "\
2024-05-01T10:00:00Z stdout F zero
2024-05-01T10:00:01Z stdout F one
2024-05-01T10:00:02Z stdout F two
";
    // The tail's two lines are "one" (older than since) and "two".
    assert_eq!(read(log, options).await, "two\n");
}

//! Fault injection against the plugin manager with real sockets: plugins
//! that send garbage or oversized answers, sockets that flap thousands of
//! times, and a directory full of things that are not sockets. Each case
//! ends in a correct, explainable state, and the manager keeps answering.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Harness, TYPE, row};
use nodeplugins::plugin_manager::PluginState;
use nodeplugins_test_support::fake_plugin::FakePlugin;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread")]
async fn garbage_bytes_fail_the_plugin_with_an_error_and_a_real_plugin_recovers() {
    let h = Harness::start().await;
    let socket = h.sock("garbage.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let garbage = tokio::spawn(async move {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut bytes = vec![0u8; rng.random_range(1..64 * 1024)];
            rng.fill(&mut bytes[..]);
            let _ = stream.write_all(&bytes).await;
        }
    });
    let table = h
        .wait_for("garbage plugin failed", |t| {
            row(t, &socket).is_some_and(|p| p.state == PluginState::Failed && p.error.is_some())
        })
        .await;
    let error = row(&table, &socket).unwrap().error.clone().unwrap();
    assert!(!error.is_empty(), "the failure says why");
    assert!(
        h.handler.snapshot().is_empty(),
        "nothing reached the handler"
    );

    // The same path with a real plugin: registered on its next attempt.
    garbage.abort();
    std::fs::remove_file(&socket).unwrap();
    let _plugin = FakePlugin::builder(TYPE, "fixed.example.com")
        .serve(&socket)
        .await;
    h.wait_registered(&socket).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_get_info_answer_is_refused_with_a_clear_error() {
    let h = Harness::start().await;
    let socket = h.sock("huge.sock");
    let huge = "x".repeat(5 << 20);
    let _plugin = FakePlugin::builder(TYPE, &huge).serve(&socket).await;
    let table = h
        .wait_for("oversized plugin failed", |t| {
            row(t, &socket).is_some_and(|p| p.state == PluginState::Failed)
        })
        .await;
    let error = row(&table, &socket).unwrap().error.clone().unwrap();
    assert!(error.contains("too large"), "{error}");
    assert!(h.handler.snapshot().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_socket_flaps_end_in_the_right_state() {
    let h = Harness::start().await;
    let socket = h.sock("flappy.sock");
    for _ in 0..3000 {
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
    }
    let _plugin = FakePlugin::builder(TYPE, "flappy.example.com")
        .serve(&socket)
        .await;
    h.wait_registered(&socket).await;
    let table = h.handle.status().await.unwrap();
    assert_eq!(table.len(), 1, "{table:#?}");
    // Whatever the flaps caused, the handler ends with exactly one live registration.
    let calls = h.handler.snapshot();
    let registers = calls.iter().filter(|c| c.starts_with("register ")).count();
    let deregisters = calls
        .iter()
        .filter(|c| c.starts_with("deregister "))
        .count();
    assert_eq!(registers, deregisters + 1, "{calls:?}");
    assert!(calls.last().unwrap().starts_with("register "), "{calls:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_full_of_things_that_are_not_sockets_is_ignored() {
    let h = Harness::start().await;
    let dir = &h.registry_dir;
    for i in 0..300 {
        std::fs::write(dir.join(format!("file-{i}.sock")), b"not a socket").unwrap();
        std::os::unix::fs::symlink(
            dir.join(format!("missing-{i}")),
            dir.join(format!("dangling-{i}.sock")),
        )
        .unwrap();
        std::fs::create_dir_all(dir.join(format!("nested-{i}/deeper"))).unwrap();
    }
    let fifo = dir.join("fifo.sock");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let socket = dir.join("nested-7/deeper/real.sock");
    let _plugin = FakePlugin::builder(TYPE, "real.example.com")
        .serve(&socket)
        .await;
    h.wait_registered(&socket).await;
    let table = h.handle.status().await.unwrap();
    assert_eq!(table.len(), 1, "only the socket is a plugin: {table:#?}");
    assert_eq!(h.handler.snapshot().len(), 2, "validate and register, once");
}

//! DRA manager latencies with a real driver (the SDK server) over a Unix
//! socket: a NodePrepareResources round trip, how long after the plugin's
//! server goes away the manager knows, and how long after the plugin serves
//! again on the same socket it is connected (the kubelet learns of the
//! first only at its next call and of the second through gRPC's backoff).
//!
//! Run: `cargo bench -p nodeplugins --bench dra`

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;

use nodeplugins::dra::{ClaimRef, DraManager, DraManagerConfig, LoggingCleanup};
use nodeplugins::event::{AgentEvent, EventKind};
use nodeplugins_api::constants::dra_service;
use nodeplugins_test_support::fake_dra_driver::{FakeDraDriver, FakeDraOptions};
use nodeplugins_test_support::stats::percentiles;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const DRIVER: &str = "bench.example.com";

/// Waits until the manager has applied a connection change of the wanted
/// kind (its event is sent as it applies it).
async fn wait_connected(events: &mut broadcast::Receiver<AgentEvent>, want: bool) {
    let kind = if want {
        EventKind::Connected
    } else {
        EventKind::Disconnected
    };
    loop {
        if events.recv().await.unwrap().kind == kind {
            return;
        }
    }
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let (dra, manager) = DraManager::new(DraManagerConfig::default(), Arc::new(LoggingCleanup));
    let mut events = manager.events();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(dra.run(shutdown.clone()));
    let mut plugin = FakeDraDriver::start(dir.path(), FakeDraOptions::new(DRIVER, "a")).await;
    manager
        .register(DRIVER, &plugin.endpoint(), &[dra_service::V1.to_string()])
        .await
        .unwrap();
    wait_connected(&mut events, true).await;

    let mut prepares = Vec::new();
    for i in 0..2000 {
        let claims = [ClaimRef {
            namespace: "default".into(),
            name: format!("claim-{i}"),
            uid: format!("uid-{i}"),
        }];
        let start = Instant::now();
        let result = manager.prepare(DRIVER, &claims).await.unwrap();
        prepares.push(start.elapsed());
        assert!(result[0].error.is_none());
    }
    println!(
        "{}",
        percentiles("NodePrepareResources round trip (1 claim)      ", prepares)
    );

    let mut drops = Vec::new();
    let mut reconnects = Vec::new();
    let mut restarts = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        let (_, ()) = tokio::join!(plugin.stop(), wait_connected(&mut events, false));
        drops.push(start.elapsed());
        let start = Instant::now();
        let (restarted, ()) = tokio::join!(
            async {
                plugin.restart().await;
                start.elapsed()
            },
            wait_connected(&mut events, true)
        );
        reconnects.push(start.elapsed());
        restarts.push(restarted);
    }
    println!(
        "{}",
        percentiles("plugin server stops -> manager sees the drop    ", drops)
    );
    println!(
        "{}",
        percentiles("plugin server start (bind, serve)               ", restarts)
    );
    println!(
        "{}",
        percentiles(
            "plugin starts again -> connected (socket watch) ",
            reconnects
        )
    );
    shutdown.cancel();
    running.await.unwrap();
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

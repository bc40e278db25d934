//! The DRA manager with real DRA drivers (the SDK server) over real sockets
//! (spec §4.4, §9 items 7-8): service negotiation, instances, connection
//! monitoring, cleanup after the grace period, prepare and unprepare through
//! both API versions, device health.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod calls;
mod cleanup;
mod connection;
mod health;
mod registration;

use std::sync::Arc;

use nodeplugins::dra::{
    ClaimRef, CleanupError, DraDriverStatus, DraHandle, DraManager, DraManagerConfig, DriverCleanup,
};
use nodeplugins::event::{AgentEvent, EventKind};
use nodeplugins_api::constants::dra_service;
use nodeplugins_test_support::fake_dra_driver::{FakeDraDriver, FakeDraOptions};
use nodeplugins_test_support::wait::TIMEOUT;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

const DRIVER: &str = "gpu.example.com";

/// Records every cleanup; fails the first `failures` calls.
struct RecordingCleanup {
    done: watch::Sender<Vec<String>>,
    failures: std::sync::Mutex<u32>,
}

#[async_trait::async_trait]
impl DriverCleanup for RecordingCleanup {
    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        let mut failures = self.failures.lock().unwrap();
        if *failures > 0 {
            *failures -= 1;
            return Err(CleanupError("API server unreachable".into()));
        }
        self.done.send_modify(|d| d.push(driver.to_string()));
        Ok(())
    }
}

struct Node {
    dir: tempfile::TempDir,
    manager: DraHandle,
    cleanups: watch::Receiver<Vec<String>>,
    events: broadcast::Receiver<AgentEvent>,
    shutdown: CancellationToken,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Node {
    fn start(tweak: impl FnOnce(&mut DraManagerConfig)) -> Self {
        Self::start_failing(tweak, 0)
    }

    fn start_failing(tweak: impl FnOnce(&mut DraManagerConfig), failures: u32) -> Self {
        nodeplugins_test_support::init_tracing();
        let mut config = DraManagerConfig::default();
        tweak(&mut config);
        let (done, cleanups) = watch::channel(Vec::new());
        let (manager, handle) = DraManager::new(
            config,
            Arc::new(RecordingCleanup {
                done,
                failures: std::sync::Mutex::new(failures),
            }),
        );
        let events = handle.events();
        let shutdown = CancellationToken::new();
        tokio::spawn(manager.run(shutdown.clone()));
        Self {
            dir: tempfile::tempdir().unwrap(),
            manager: handle,
            cleanups,
            events,
            shutdown,
        }
    }

    async fn driver(&self, instance: &str) -> FakeDraDriver {
        FakeDraDriver::start(self.dir.path(), FakeDraOptions::new(DRIVER, instance)).await
    }

    async fn driver_with(&self, options: FakeDraOptions) -> FakeDraDriver {
        FakeDraDriver::start(self.dir.path(), options).await
    }

    async fn status(&self) -> Option<DraDriverStatus> {
        let all = self.manager.status().await.unwrap();
        all.into_iter().find(|d| d.name == DRIVER)
    }

    async fn wait(
        &self,
        what: &str,
        pred: impl Fn(Option<&DraDriverStatus>) -> bool,
    ) -> Option<DraDriverStatus> {
        self.manager
            .wait_for(TIMEOUT, |all| pred(all.iter().find(|d| d.name == DRIVER)))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("timed out after {TIMEOUT:?} waiting for {what}"));
        self.status().await
    }

    /// The next event of `kind`, skipping others.
    async fn event(&mut self, kind: EventKind) -> AgentEvent {
        loop {
            let event = tokio::time::timeout(TIMEOUT, self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("no {kind:?} event"))
                .unwrap();
            if event.kind == kind {
                return event;
            }
        }
    }
}

fn both() -> Vec<String> {
    vec![dra_service::V1.into(), dra_service::V1BETA1.into()]
}

fn claim(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "default".into(),
        name: format!("claim-{uid}"),
        uid: uid.into(),
    }
}

fn in_use(status: &DraDriverStatus) -> Option<&str> {
    status
        .instances
        .iter()
        .find(|i| i.in_use)
        .map(|i| i.endpoint.as_str())
}

async fn prepared_by(node: &Node, uid: &str) -> String {
    let result = node.manager.prepare(DRIVER, &[claim(uid)]).await.unwrap();
    assert_eq!(result[0].error, None);
    result[0].devices[0].share_id.clone().unwrap()
}

//! The DRA manager's state transitions without a plugin: every endpoint is
//! a path where no socket exists, so instances are registered, never
//! connect, are deregistered and their drivers cleaned up.

use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::dra::drivers::cleanup::CleanupError;
use crate::dra::status::DraDriverStatus;
use nodeplugins_api::dra_client::ServiceError;

const TIMEOUT: Duration = Duration::from_secs(10);
const DRIVER: &str = "gpu.example.com";

/// A cleanup hook recording the drivers it cleaned up, failing the first
/// `fail` calls.
#[derive(Default)]
struct Recording {
    gone: Mutex<Vec<String>>,
    fail: Mutex<u32>,
}

#[async_trait::async_trait]
impl DriverCleanup for Recording {
    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        let mut fail = self.fail.lock().unwrap_or_else(|p| p.into_inner());
        if *fail > 0 {
            *fail -= 1;
            return Err(CleanupError("API server unreachable".into()));
        }
        let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        gone.push(driver.into());
        Ok(())
    }
}

/// A running manager, its hook and its events.
struct Harness {
    handle: DraHandle,
    events: broadcast::Receiver<AgentEvent>,
    cleanup: Arc<Recording>,
    dir: tempfile::TempDir,
    shutdown: CancellationToken,
}

fn start(grace: Duration, failing_cleanups: u32) -> Harness {
    let config = DraManagerConfig {
        cleanup_grace: grace,
        reconnect_initial: Duration::from_millis(10),
        reconnect_max: Duration::from_millis(20),
        ..DraManagerConfig::default()
    };
    let cleanup = Arc::new(Recording {
        fail: Mutex::new(failing_cleanups),
        ..Recording::default()
    });
    let (manager, handle) = DraManager::new(config, cleanup.clone());
    let events = handle.events();
    let shutdown = CancellationToken::new();
    tokio::spawn(manager.run(shutdown.clone()));
    Harness {
        handle,
        events,
        cleanup,
        dir: tempfile::tempdir().unwrap(),
        shutdown,
    }
}

impl Harness {
    /// An endpoint in the scratch directory where no socket exists.
    fn endpoint(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    async fn register(&self, endpoint: &str) -> Result<(), DraError> {
        let services = [nodeplugins_api::constants::dra_service::V1.to_string()];
        self.handle.register(DRIVER, endpoint, &services).await
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

    /// The driver's row, once `pred` holds for it.
    async fn driver_when(
        &self,
        pred: impl Fn(Option<&DraDriverStatus>) -> bool,
    ) -> Option<DraDriverStatus> {
        let drivers = self
            .handle
            .wait_for(TIMEOUT, |all| pred(all.iter().find(|d| d.name == DRIVER)))
            .await
            .unwrap()
            .expect("the driver's state in time");
        drivers.into_iter().find(|d| d.name == DRIVER)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[tokio::test]
async fn an_instance_nobody_serves_is_registered_unconnected_with_a_cleanup_pending() {
    let mut node = start(Duration::from_secs(3600), 0);
    let endpoint = node.endpoint("a.sock");
    node.register(&endpoint).await.unwrap();
    let added = node.event(EventKind::InstanceAdded).await;
    assert_eq!(added.driver(), Some(DRIVER));
    assert_eq!(added.endpoint(), Some(endpoint.as_str()));

    // Its first connection attempt fails: no instance is usable, so the
    // driver's cleanup is scheduled for the end of the grace period.
    node.event(EventKind::CleanupScheduled).await;
    let driver = node
        .driver_when(|d| d.is_some_and(|d| d.pending_cleanup.is_some()))
        .await
        .unwrap();
    assert_eq!(driver.instances.len(), 1);
    assert_eq!(driver.instances[0].endpoint, endpoint);
    assert!(!driver.instances[0].connected);
    assert!(driver.pending_cleanup.unwrap().in_ms > 3_000_000);

    // The same endpoint twice is refused and changes nothing.
    let again = node.register(&endpoint).await;
    assert!(
        matches!(again, Err(DraError::AlreadyRegistered { .. })),
        "{again:?}"
    );
    let driver = node.driver_when(|d| d.is_some()).await.unwrap();
    assert_eq!(driver.instances.len(), 1);
}

#[tokio::test]
async fn registrations_the_manager_cannot_use_are_refused_before_any_change() {
    let node = start(Duration::from_secs(3600), 0);
    let services = [nodeplugins_api::constants::dra_service::V1.to_string()];
    let relative = node.handle.register(DRIVER, "a.sock", &services).await;
    assert!(
        matches!(relative, Err(DraError::BadEndpoint { .. })),
        "{relative:?}"
    );
    let unnamed = node.handle.register("", "/a.sock", &services).await;
    assert!(matches!(unnamed, Err(DraError::EmptyName)), "{unnamed:?}");
    let unknown = ["v0.Unknown".to_string()];
    let endpoint = node.endpoint("a.sock");
    let unsupported = node.handle.register(DRIVER, &endpoint, &unknown).await;
    assert!(
        matches!(
            &unsupported,
            Err(DraError::Service(ServiceError::NoneSupported { services })) if services == &unknown
        ),
        "{unsupported:?}"
    );
    assert!(node.handle.status().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_last_instance_gone_the_driver_is_cleaned_up_after_the_grace_period() {
    let mut node = start(Duration::from_millis(50), 0);
    let (a, b) = (node.endpoint("a.sock"), node.endpoint("b.sock"));
    node.register(&a).await.unwrap();
    node.register(&b).await.unwrap();
    node.driver_when(|d| d.is_some_and(|d| d.instances.len() == 2))
        .await;

    node.handle.deregister(DRIVER, &a).await;
    let removed = node.event(EventKind::InstanceRemoved).await;
    assert_eq!(removed.endpoint(), Some(a.as_str()));
    let driver = node.driver_when(|d| d.is_some()).await.unwrap();
    assert_eq!(driver.instances.len(), 1);
    assert_eq!(driver.instances[0].endpoint, b);

    // An unknown instance is ignored.
    node.handle.deregister(DRIVER, &a).await;
    node.handle.deregister(DRIVER, &b).await;
    node.event(EventKind::CleanedUp).await;
    let driver = node
        .driver_when(|d| d.is_none_or(|d| d.cleaned_up_at_unix_ms.is_some()))
        .await;
    if let Some(driver) = driver {
        assert!(driver.instances.is_empty(), "{driver:?}");
        assert!(driver.pending_cleanup.is_none(), "{driver:?}");
    }
    assert_eq!(*node.cleanup.gone.lock().unwrap(), [DRIVER]);
}

#[tokio::test]
async fn a_failed_cleanup_is_counted_and_retried_until_it_succeeds() {
    let mut node = start(Duration::from_millis(20), 1);
    let a = node.endpoint("a.sock");
    node.register(&a).await.unwrap();
    node.handle.deregister(DRIVER, &a).await;

    let failed = node.event(EventKind::CleanupFailed).await;
    assert_eq!(failed.detail(), Some("API server unreachable"));
    node.driver_when(|d| {
        d.and_then(|d| d.pending_cleanup.as_ref())
            .is_some_and(|p| p.failures == 1)
    })
    .await;
    // The retry (after a second) succeeds.
    node.event(EventKind::CleanedUp).await;
    assert_eq!(*node.cleanup.gone.lock().unwrap(), [DRIVER]);
}

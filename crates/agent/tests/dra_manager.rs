//! The DRA manager with real DRA drivers (the SDK server) over real sockets
//! (spec §4.4, §9 items 7-8): service negotiation, instances, connection
//! monitoring, cleanup after the grace period, prepare and unprepare through
//! both API versions, device health.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use nodeplugins::dra::{
    ClaimPod, ClaimRef, CleanupError, DraDriverStatus, DraError, DraEvent, DraEventKind, DraHandle,
    DraManager, DraManagerConfig, DraService, DriverCleanup, HealthService,
};
use nodeplugins_api::constants::dra_service;
use nodeplugins_api::dra_health::v1::HealthStatus;
use nodeplugins_sdk::dra_driver::ApiVersions;
use nodeplugins_test_support::fake_dra_driver::{FakeDraDriver, FakeDraOptions};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
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
    events: broadcast::Receiver<DraEvent>,
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
        let manager = DraManager::new(
            config,
            Arc::new(RecordingCleanup {
                done,
                failures: std::sync::Mutex::new(failures),
            }),
        );
        let handle = manager.handle();
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
    async fn event(&mut self, kind: DraEventKind) -> DraEvent {
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

#[tokio::test]
async fn services_are_negotiated_in_the_plugins_order() {
    let node = Node::start(|_| {});
    let plugin = node.driver("a").await;
    let endpoint = plugin.endpoint();
    let cases: &[(&str, &[&str], Result<DraService, &str>)] = &[
        (
            "no-services",
            &[],
            Err("empty list of supported gRPC services"),
        ),
        (
            "version",
            &["1.0.0"],
            Err("none of services supported by the plugin"),
        ),
        (
            "current-service",
            &[dra_service::V1BETA1],
            Ok(DraService::V1beta1),
        ),
        (
            "two-services",
            &[dra_service::V1BETA1, dra_service::V1],
            Ok(DraService::V1beta1),
        ),
        (
            "v1-first",
            &[dra_service::V1, dra_service::V1BETA1],
            Ok(DraService::V1),
        ),
        (
            "unknown-skipped",
            &["v9.DRAPlugin", dra_service::HEALTH_V1, dra_service::V1],
            Ok(DraService::V1),
        ),
    ];
    for (name, services, want) in cases {
        let services: Vec<String> = services.iter().map(|s| s.to_string()).collect();
        let got = node.manager.register(DRIVER, &endpoint, &services).await;
        match want {
            Err(text) => {
                let error = got.expect_err(name).to_string();
                assert!(error.contains(text), "{name}: {error}");
                assert!(
                    node.status().await.is_none(),
                    "{name}: a refused plugin leaves no trace"
                );
            }
            Ok(service) => {
                got.unwrap_or_else(|e| panic!("{name}: {e}"));
                let status = node.status().await.unwrap();
                assert_eq!(status.instances[0].service, *service, "{name}");
                node.manager.deregister(DRIVER, &endpoint).await;
            }
        }
    }
}

#[tokio::test]
async fn the_same_endpoint_twice_is_refused_and_a_new_endpoint_takes_over() {
    let node = Node::start(|_| {});
    let old = node.driver("old").await;
    let new = node.driver("new").await;
    node.manager
        .register(DRIVER, &old.endpoint(), &both())
        .await
        .unwrap();
    let again = node
        .manager
        .register(DRIVER, &old.endpoint(), &both())
        .await;
    assert_eq!(
        again.unwrap_err(),
        DraError::AlreadyRegistered {
            driver: DRIVER.into(),
            endpoint: old.endpoint()
        }
    );
    assert_eq!(prepared_by(&node, "1").await, "share-old");

    node.manager
        .register(DRIVER, &new.endpoint(), &both())
        .await
        .unwrap();
    let status = node
        .wait("both connected", |s| {
            s.is_some_and(|s| s.instances.iter().all(|i| i.connected))
        })
        .await
        .unwrap();
    assert_eq!(in_use(&status), Some(new.endpoint().as_str()));
    assert_eq!(prepared_by(&node, "2").await, "share-new");

    // Removing the old instance leaves the new one; removing it twice, or an
    // endpoint never registered, changes nothing.
    node.manager.deregister(DRIVER, &old.endpoint()).await;
    node.manager.deregister(DRIVER, &old.endpoint()).await;
    node.manager.deregister(DRIVER, "/nowhere/dra.sock").await;
    node.manager
        .deregister("unknown.example.com", &new.endpoint())
        .await;
    let status = node.status().await.unwrap();
    assert_eq!(status.instances.len(), 1);
    assert_eq!(in_use(&status), Some(new.endpoint().as_str()));
    assert_eq!(prepared_by(&node, "3").await, "share-new");
}

#[tokio::test]
async fn calls_go_to_the_newest_connected_instance_and_fall_back() {
    let node = Node::start(|_| {});
    let old = node.driver("old").await;
    let mut new = node.driver("new").await;
    node.manager
        .register(DRIVER, &old.endpoint(), &both())
        .await
        .unwrap();
    node.manager
        .register(DRIVER, &new.endpoint(), &both())
        .await
        .unwrap();
    assert_eq!(prepared_by(&node, "1").await, "share-new");

    // The new instance's server stops: noticed without any call, and calls
    // go to the old one, which is still connected. Nothing is deregistered.
    new.stop().await;
    let status = node
        .wait("new instance disconnected", |s| {
            s.is_some_and(|s| s.instances.iter().any(|i| !i.connected))
        })
        .await
        .unwrap();
    assert_eq!(status.instances.len(), 2);
    assert_eq!(in_use(&status), Some(old.endpoint().as_str()));
    assert_eq!(prepared_by(&node, "2").await, "share-old");

    // It comes back on the same socket: reconnected, and newest again.
    new.restart().await;
    node.wait("new instance reconnected", |s| {
        s.is_some_and(|s| s.instances.iter().all(|i| i.connected))
    })
    .await;
    assert_eq!(prepared_by(&node, "3").await, "share-new");

    // Deregistering the newest falls back to the old one.
    node.manager.deregister(DRIVER, &new.endpoint()).await;
    assert_eq!(prepared_by(&node, "4").await, "share-old");
}

#[tokio::test]
async fn unknown_drivers_and_empty_names_are_errors() {
    let node = Node::start(|_| {});
    assert_eq!(
        node.manager.prepare("", &[claim("1")]).await.unwrap_err(),
        DraError::EmptyName
    );
    assert_eq!(
        node.manager
            .prepare("missing.example.com", &[claim("1")])
            .await
            .unwrap_err()
            .to_string(),
        "DRA driver missing.example.com is not registered"
    );
    let relative = node.manager.register(DRIVER, "dra.sock", &both()).await;
    assert!(matches!(relative, Err(DraError::BadEndpoint { .. })));
}

#[tokio::test]
async fn a_dropped_connection_is_cleaned_up_after_the_grace_period() {
    let mut node = Node::start(|c| c.cleanup_grace = Duration::from_millis(300));
    let mut plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    node.event(DraEventKind::Connected).await;

    plugin.stop().await;
    let disconnected = node.event(DraEventKind::Disconnected).await;
    assert_eq!(disconnected.endpoint, Some(plugin.endpoint()));
    node.event(DraEventKind::CleanupScheduled).await;
    let status = node.status().await.unwrap();
    assert!(status.pending_cleanup.is_some(), "{status:?}");
    assert_eq!(status.instances.len(), 1, "a drop does not deregister");

    node.event(DraEventKind::CleanedUp).await;
    assert_eq!(*node.cleanups.borrow(), [DRIVER]);
    let status = node.status().await.unwrap();
    assert!(status.pending_cleanup.is_none());
    assert!(status.cleaned_up_at_unix_ms.is_some());
}

#[tokio::test]
async fn a_reconnect_within_the_grace_period_cancels_the_cleanup() {
    let mut node = Node::start(|c| c.cleanup_grace = Duration::from_secs(3600));
    let mut plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    plugin.stop().await;
    node.event(DraEventKind::CleanupScheduled).await;
    assert!(node.status().await.unwrap().pending_cleanup.is_some());

    plugin.restart().await;
    node.event(DraEventKind::Connected).await;
    node.event(DraEventKind::CleanupCancelled).await;
    let status = node.status().await.unwrap();
    assert!(status.pending_cleanup.is_none());
    assert!(node.cleanups.borrow().is_empty());
    assert_eq!(prepared_by(&node, "1").await, "share-a");
}

#[tokio::test]
async fn deregistering_the_last_instance_schedules_the_cleanup_once() {
    let mut node = Node::start(|c| c.cleanup_grace = Duration::from_millis(200));
    let plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    node.manager.deregister(DRIVER, &plugin.endpoint()).await;
    node.manager.deregister(DRIVER, &plugin.endpoint()).await;
    node.event(DraEventKind::CleanupScheduled).await;
    node.event(DraEventKind::CleanedUp).await;
    assert_eq!(*node.cleanups.borrow(), [DRIVER]);
    // A driver with no instances left is forgotten once cleaned up.
    node.wait("driver forgotten", |s| s.is_none()).await;
}

#[tokio::test]
async fn a_failing_cleanup_is_retried_and_shown() {
    let mut node = Node::start_failing(|c| c.cleanup_grace = Duration::from_millis(50), 1);
    let plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    node.manager.deregister(DRIVER, &plugin.endpoint()).await;
    let failed = node.event(DraEventKind::CleanupFailed).await;
    assert_eq!(failed.detail.as_deref(), Some("API server unreachable"));
    let pending = node.status().await.and_then(|s| s.pending_cleanup);
    if let Some(pending) = pending {
        assert_eq!(pending.failures, 1);
    }
    node.event(DraEventKind::CleanedUp).await;
    assert_eq!(*node.cleanups.borrow(), [DRIVER]);
}

#[tokio::test]
async fn prepare_and_unprepare_work_through_both_api_versions() {
    let node = Node::start(|_| {});
    for (version, versions, services) in [
        (
            "v1",
            ApiVersions {
                v1: true,
                v1beta1: false,
            },
            vec![dra_service::V1.to_string()],
        ),
        (
            "v1beta1",
            ApiVersions {
                v1: false,
                v1beta1: true,
            },
            vec![dra_service::V1BETA1.to_string()],
        ),
    ] {
        let mut options = FakeDraOptions::new(DRIVER, version);
        options.api_versions = versions;
        let plugin = node.driver_with(options).await;
        node.manager
            .register(DRIVER, &plugin.endpoint(), &services)
            .await
            .unwrap();
        plugin.behaviour().fail.insert("bad".into());
        plugin.behaviour().omit.insert("lost".into());

        let claims = [claim("ok"), claim("bad"), claim("lost")];
        let prepared = node.manager.prepare(DRIVER, &claims).await.unwrap();
        assert_eq!(prepared.len(), 3, "{version}");
        let ok = &prepared[0];
        assert_eq!(ok.claim, claims[0]);
        assert_eq!(ok.error, None, "{version}");
        assert_eq!(ok.devices[0].device, "dev-ok");
        assert_eq!(ok.devices[0].pool, "pool");
        assert_eq!(ok.devices[0].request_names, ["req"]);
        assert_eq!(
            ok.devices[0].cdi_device_ids,
            ["test.example.com/dev=dev-ok"]
        );
        // share_id exists only in v1.
        let share = (version == "v1").then(|| format!("share-{version}"));
        assert_eq!(ok.devices[0].share_id, share, "{version}");
        assert_eq!(
            prepared[1].error.as_deref(),
            Some(format!("{version} refuses bad").as_str())
        );
        assert!(prepared[1].devices.is_empty());
        assert!(
            prepared[2].error.as_deref().unwrap().contains("no result"),
            "{version}"
        );

        let unprepared = node.manager.unprepare(DRIVER, &claims).await.unwrap();
        assert_eq!(unprepared[0].error, None, "{version}");
        assert!(unprepared[1].error.is_some());
        assert!(unprepared[2].error.is_some());
        let calls = plugin.calls().borrow().clone();
        assert_eq!(calls.iter().filter(|(op, _)| op == "unprepare").count(), 3);
        node.manager.deregister(DRIVER, &plugin.endpoint()).await;
    }
}

#[tokio::test]
async fn a_claim_from_two_drivers_is_unprepared_by_both_and_fails_naming_the_one_that_failed() {
    const NIC: &str = "nic.example.com";
    let node = Node::start(|_| {});
    let gpu = node.driver("gpu").await;
    let nic = node.driver_with(FakeDraOptions::new(NIC, "nic")).await;
    for (driver, plugin) in [(DRIVER, &gpu), (NIC, &nic)] {
        node.manager
            .register(driver, &plugin.endpoint(), &both())
            .await
            .unwrap();
    }
    let shared = [claim("shared")];
    for driver in [DRIVER, NIC] {
        let prepared = node.manager.prepare(driver, &shared).await.unwrap();
        assert_eq!(prepared[0].error, None, "{driver}");
    }
    let drivers = |node: &Node| -> Vec<String> {
        let claims = node.manager.prepared_claims();
        claims.into_iter().map(|c| c.driver).collect()
    };
    assert_eq!(drivers(&node), [DRIVER, NIC], "one record per driver");

    // The NIC driver fails: the claim fails naming it; the GPU driver's part
    // is unprepared and forgotten, the NIC driver's is kept for a retry.
    nic.behaviour().fail.insert("shared".into());
    let unprepared = node.manager.unprepare_recorded(&shared).await;
    let error = unprepared[0].error.as_deref().unwrap();
    assert!(error.starts_with(&format!("DRA driver {NIC}: ")), "{error}");
    assert!(!error.contains(DRIVER), "{error}");
    assert_eq!(drivers(&node), [NIC]);
    let unprepare_calls = |plugin: &FakeDraDriver| {
        let calls = plugin.calls().borrow().clone();
        calls.iter().filter(|(op, _)| op == "unprepare").count()
    };
    assert_eq!((unprepare_calls(&gpu), unprepare_calls(&nic)), (1, 1));

    nic.behaviour().fail.clear();
    let unprepared = node.manager.unprepare_recorded(&shared).await;
    assert_eq!(unprepared[0].error, None);
    assert!(drivers(&node).is_empty());
    assert_eq!(
        (unprepare_calls(&gpu), unprepare_calls(&nic)),
        (1, 2),
        "only the driver that still had it"
    );
}

#[tokio::test]
async fn a_prepare_naming_a_known_pod_uid_with_another_name_is_refused() {
    let node = Node::start(|_| {});
    let plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    let pod = |name: &str| ClaimPod::new("pod-uid", name, vec!["main".into()]);
    let first = node
        .manager
        .prepare_for_pod(DRIVER, &[claim("one")], &pod("train"))
        .await
        .unwrap();
    assert_eq!(first[0].error, None);

    let renamed = node
        .manager
        .prepare_for_pod(DRIVER, &[claim("two")], &pod("serve"))
        .await;
    assert_eq!(
        renamed,
        Err(DraError::PodRenamed {
            pod: "pod-uid".into(),
            known: "default/train".into(),
            given: "default/serve".into(),
        })
    );
    assert_eq!(
        renamed.unwrap_err().to_string(),
        "pod pod-uid is default/train, not default/serve"
    );
    let prepares = plugin
        .calls()
        .borrow()
        .iter()
        .filter(|(op, _)| op == "prepare")
        .count();
    assert_eq!(
        prepares, 1,
        "the driver is not called for a refused prepare"
    );
    let records = node.manager.prepared_claims();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].pods, [pod("train")]);
}

#[tokio::test]
async fn a_plugin_without_the_chosen_service_answers_unimplemented() {
    let node = Node::start(|_| {});
    let mut options = FakeDraOptions::new(DRIVER, "v1only");
    options.api_versions = ApiVersions {
        v1: true,
        v1beta1: false,
    };
    let plugin = node.driver_with(options).await;
    // It claims v1beta1 but does not serve it.
    node.manager
        .register(
            DRIVER,
            &plugin.endpoint(),
            &[dra_service::V1BETA1.to_string()],
        )
        .await
        .unwrap();
    let error = node
        .manager
        .prepare(DRIVER, &[claim("1")])
        .await
        .unwrap_err();
    match error {
        DraError::Call {
            code, operation, ..
        } => {
            assert_eq!(code, tonic::Code::Unimplemented);
            assert_eq!(operation, "NodePrepareResources");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_hanging_plugin_gets_deadline_exceeded_and_the_agent_goes_on() {
    let node = Node::start(|c| c.call_timeout = Duration::from_millis(300));
    let plugin = node.driver("slow").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    plugin.behaviour().hang = true;
    let error = node
        .manager
        .prepare(DRIVER, &[claim("1")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            DraError::Call {
                code: tonic::Code::DeadlineExceeded,
                ..
            }
        ),
        "{error:?}"
    );
    // The connection survives a timed-out call.
    plugin.behaviour().hang = false;
    assert_eq!(prepared_by(&node, "2").await, "share-slow");
    assert_eq!(node.status().await.unwrap().instances[0].connects, 1);
}

#[tokio::test]
async fn concurrent_calls_and_the_health_stream_share_one_connection() {
    let node = Node::start(|_| {});
    let mut options = FakeDraOptions::new(DRIVER, "a");
    options.health = true;
    let plugin = node.driver_with(options).await;
    let mut services = both();
    services.push(dra_service::HEALTH_V1.into());
    node.manager
        .register(DRIVER, &plugin.endpoint(), &services)
        .await
        .unwrap();
    let calls = (0..16).map(|i| {
        let manager = node.manager.clone();
        async move { manager.prepare(DRIVER, &[claim(&i.to_string())]).await }
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap()[0].error, None);
    }
    node.wait("health reported", |s| {
        s.is_some_and(|s| !s.devices.is_empty())
    })
    .await;
    assert_eq!(node.status().await.unwrap().instances[0].connects, 1);
    assert_eq!(plugin.calls().borrow().len(), 16);
}

#[tokio::test]
async fn device_health_follows_the_stream_in_both_versions() {
    let node = Node::start(|_| {});
    for (instance, health_service) in [
        ("h1", dra_service::HEALTH_V1),
        ("h1alpha1", dra_service::HEALTH_V1ALPHA1),
    ] {
        let mut options = FakeDraOptions::new(DRIVER, instance);
        options.health = true;
        let mut plugin = node.driver_with(options).await;
        let services = vec![dra_service::V1.to_string(), health_service.to_string()];
        node.manager
            .register(DRIVER, &plugin.endpoint(), &services)
            .await
            .unwrap();
        let status = node
            .wait("device healthy", |s| {
                s.is_some_and(|s| {
                    s.devices
                        .iter()
                        .any(|d| d.device == "dev-0" && d.health == "Healthy")
                })
            })
            .await
            .unwrap();
        let want = if instance == "h1" {
            HealthService::V1
        } else {
            HealthService::V1alpha1
        };
        assert_eq!(status.instances[0].health_service, Some(want));

        plugin
            .health()
            .set("pool", "dev-0", HealthStatus::Unhealthy, "fell off the bus");
        let status = node
            .wait("device unhealthy", |s| {
                s.is_some_and(|s| s.devices.iter().any(|d| d.health == "Unhealthy"))
            })
            .await
            .unwrap();
        // v1alpha1 carries no message.
        let message = if instance == "h1" {
            "fell off the bus"
        } else {
            ""
        };
        assert_eq!(status.devices[0].message, message);

        // A disconnected instance's reports are not trusted.
        plugin.stop().await;
        node.wait("health unknown", |s| {
            s.is_some_and(|s| s.devices.iter().all(|d| d.health == "Unknown" && d.stale))
        })
        .await;
        node.manager.deregister(DRIVER, &plugin.endpoint()).await;
    }
}

#[tokio::test]
async fn a_restarted_plugin_is_reconnected_without_waiting_out_the_backoff() {
    // After one failed attempt the next would be an hour away: only the
    // watch on the socket's directory can bring the instance back in time.
    let node = Node::start(|c| {
        c.reconnect_initial = Duration::from_secs(3600);
        c.reconnect_max = Duration::from_secs(3600);
    });
    let mut plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    plugin.stop().await;
    node.wait("disconnected", |s| {
        s.is_some_and(|s| {
            !s.instances[0].connected
                && s.instances[0]
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("dial"))
        })
    })
    .await;
    plugin.restart().await;
    node.wait("reconnected", |s| {
        s.is_some_and(|s| s.instances[0].connected)
    })
    .await;
    assert_eq!(prepared_by(&node, "1").await, "share-a");
}

#[tokio::test]
async fn a_plugin_registered_before_it_serves_is_connected_when_it_starts() {
    let node = Node::start(|_| {});
    let mut plugin = node.driver("late").await;
    let endpoint = plugin.endpoint();
    plugin.stop().await;
    node.manager
        .register(DRIVER, &endpoint, &both())
        .await
        .unwrap();
    let status = node.status().await.unwrap();
    assert!(!status.instances[0].connected);
    let error = node
        .manager
        .prepare(DRIVER, &[claim("1")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            DraError::Call {
                code: tonic::Code::Unavailable,
                ..
            }
        ),
        "{error:?}"
    );
    plugin.restart().await;
    node.wait("connected", |s| s.is_some_and(|s| s.instances[0].connected))
        .await;
    assert_eq!(prepared_by(&node, "2").await, "share-late");
}

#[tokio::test]
async fn a_socket_that_accepts_but_never_answers_is_not_connected() {
    // A process stuck (or exiting) with its socket still listening: the dial
    // and the client preface succeed, but no server ever answers.
    let node = Node::start(|c| c.dial_timeout = Duration::from_millis(200));
    let endpoint = node.dir.path().join("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&endpoint).unwrap();
    let endpoint = endpoint.display().to_string();
    node.manager
        .register(DRIVER, &endpoint, &both())
        .await
        .unwrap();
    // A failed attempt is not a change of connectedness: poll.
    let status = eventually("first attempt done", TIMEOUT, || async {
        node.status()
            .await
            .filter(|s| s.instances[0].last_error.is_some())
    })
    .await;
    assert!(!status.instances[0].connected, "{status:?}");
    assert!(
        status.instances[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("no connection within"),
        "{status:?}"
    );
    assert_eq!(status.instances[0].connects, 0);
    assert!(status.pending_cleanup.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn through_the_plugin_manager_the_service_is_connected_once_the_plugin_was_told() {
    use nodeplugins::dra::DraPluginHandler;
    use nodeplugins::plugin_manager::{PluginManager, PluginManagerConfig};
    use nodeplugins_test_support::fake_plugin::FakePlugin;
    use tokio::io::AsyncReadExt;

    let node = Node::start(|_| {});
    let registry = node.dir.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let manager = PluginManager::new(PluginManagerConfig::new(&registry));
    manager.add_handler(
        "DRAPlugin",
        Arc::new(DraPluginHandler::new(node.manager.clone())),
    );
    tokio::spawn(manager.run(node.shutdown.clone()));

    // The driver's service socket, watched for the agent's connection.
    let service = node.dir.path().join("dra.sock");
    let listener = tokio::net::UnixListener::bind(&service).unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let _plugin = FakePlugin::builder("DRAPlugin", DRIVER)
        .endpoint(service.display().to_string())
        .versions(&[dra_service::V1])
        .notify_gate(gate.clone())
        .serve(registry.join("gpu-reg.sock"))
        .await;
    node.wait("the instance registered", |s| {
        s.is_some_and(|s| s.instances.len() == 1)
    })
    .await;
    // The plugin waits for its notification: nothing dials its service.
    let early = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(
        early.is_err(),
        "the service was dialed before the plugin was told"
    );

    gate.add_permits(1);
    let (mut connection, _) = tokio::time::timeout(TIMEOUT, listener.accept())
        .await
        .expect("the service is dialed once the plugin was told")
        .unwrap();
    let mut preface = [0u8; 24];
    connection.read_exact(&mut preface).await.unwrap();
    assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
}

#[tokio::test]
async fn a_call_upgrades_the_light_connection_and_the_instance_stays_connected() {
    let node = Node::start(|_| {});
    let driver = node.driver("a").await;
    node.manager
        .register(DRIVER, &driver.endpoint(), &both())
        .await
        .unwrap();
    node.wait("connected", |s| s.is_some_and(|s| s.instances[0].connected))
        .await;
    let mut events = node.manager.events();
    assert_eq!(prepared_by(&node, "1").await, "share-a");
    assert_eq!(prepared_by(&node, "2").await, "share-a");
    let status = node.status().await.unwrap();
    assert!(status.instances[0].connected, "{status:?}");
    // The upgrade is not a disconnection.
    while let Ok(event) = events.try_recv() {
        assert_ne!(event.kind, DraEventKind::Disconnected, "{event:?}");
    }
}

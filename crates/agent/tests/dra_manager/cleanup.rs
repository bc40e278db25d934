//! Cleanup after the grace period: after a dropped connection or the last
//! deregistration, cancelled by a reconnection, retried when it fails.

use std::time::Duration;

use nodeplugins::event::EventKind;

use super::{DRIVER, Node, both, prepared_by};

#[tokio::test]
async fn a_dropped_connection_is_cleaned_up_after_the_grace_period() {
    let mut node = Node::start(|c| c.cleanup_grace = Duration::from_millis(300));
    let mut plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    node.event(EventKind::Connected).await;

    plugin.stop().await;
    let disconnected = node.event(EventKind::Disconnected).await;
    assert_eq!(disconnected.endpoint(), Some(plugin.endpoint().as_str()));
    node.event(EventKind::CleanupScheduled).await;
    let status = node.status().await.unwrap();
    assert!(status.pending_cleanup.is_some(), "{status:?}");
    assert_eq!(status.instances.len(), 1, "a drop does not deregister");

    node.event(EventKind::CleanedUp).await;
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
    node.event(EventKind::CleanupScheduled).await;
    assert!(node.status().await.unwrap().pending_cleanup.is_some());

    plugin.restart().await;
    node.event(EventKind::Connected).await;
    node.event(EventKind::CleanupCancelled).await;
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
    node.event(EventKind::CleanupScheduled).await;
    node.event(EventKind::CleanedUp).await;
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
    let failed = node.event(EventKind::CleanupFailed).await;
    assert_eq!(failed.detail(), Some("API server unreachable"));
    let pending = node.status().await.and_then(|s| s.pending_cleanup);
    if let Some(pending) = pending {
        assert_eq!(pending.failures, 1);
    }
    node.event(EventKind::CleanedUp).await;
    assert_eq!(*node.cleanups.borrow(), [DRIVER]);
}

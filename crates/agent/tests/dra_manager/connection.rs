//! Connection monitoring: reconnecting without waiting out the backoff, a
//! plugin registered before it serves, a socket that never answers, the
//! plugin manager's notification before the first dial, the light connection.

use std::sync::Arc;
use std::time::Duration;

use nodeplugins::dra::DraError;
use nodeplugins::event::EventKind;
use nodeplugins_api::constants::dra_service;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

use super::{DRIVER, Node, both, claim, prepared_by};

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
    let (manager, _) = PluginManager::new(PluginManagerConfig::new(&registry));
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
        assert_ne!(event.kind, EventKind::Disconnected, "{event:?}");
    }
}

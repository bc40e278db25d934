//! Registering instances: service negotiation, the same endpoint twice, calls
//! going to the newest connected instance, unknown drivers and bad names.

use nodeplugins::dra::{DraError, DraService};
use nodeplugins_api::constants::dra_service;

use super::{DRIVER, Node, both, claim, in_use, prepared_by};

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
    // Both connected: the newest is used. (While only the old one is, it
    // would be: the newest connected instance comes first.)
    node.wait("both instances connected", |s| {
        s.is_some_and(|s| s.instances.len() == 2 && s.instances.iter().all(|i| i.connected))
    })
    .await;
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

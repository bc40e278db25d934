//! Device health from the plugin's health stream, in both of its versions.

use nodeplugins::dra::HealthService;
use nodeplugins_api::constants::dra_service;
use nodeplugins_sdk::dra_driver::DeviceHealth;
use nodeplugins_test_support::fake_dra_driver::FakeDraOptions;

use super::{DRIVER, Node};

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
            .set("pool", "dev-0", DeviceHealth::Unhealthy, "fell off the bus");
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

//! Device health as the kubelet's own DRA manager reports it for a pod's
//! containers: a driver whose health checker stopped is seen as such (its
//! devices `Unknown` once the checker's timeout passed), though the driver
//! itself still runs and still sends its health stream.

use std::sync::Arc;
use std::time::Duration;

use nodeplugins_sdk::dra_driver::DeviceHealth;
use nodeplugins_sdk::dra_driver::{DraDriverServer, HealthReporter, Pool, Resources};
use nodeplugins_sdk::k8s_openapi::api::resource::v1::Device;
use nodeplugins_test_support::echo_dra_driver::AllocationEcho;
use tokio_util::sync::CancellationToken;

use nodeplugins_test_support::wait::POLL;

use super::*;

/// The health the kubelet reports of container `main` of pod `default/gpu`.
async fn kubelet_health(kubelet: &mut GoProcess) -> Vec<String> {
    let reply = kubelet
        .request(
            TIMEOUT,
            "health",
            json!({"namespace": "default", "name": "gpu"}),
        )
        .await;
    assert_eq!(reply["error"], "", "{reply}");
    reply["response"]["containers"]["main"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|r| r["health"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelet_reports_a_device_unknown_once_the_drivers_health_checker_stopped() {
    /// How long a checker's report holds: long enough for the test to ask
    /// the kubelet once on a busy machine, short enough to wait out.
    const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
    let (api, _control) = ControlPlane::with_node(NODE, CLASS, DRIVER).await;
    let root = tempfile::tempdir().unwrap();
    let mut kubelet = kubelet_dra(&api, root.path(), &[]).await;

    // The driver's health checker reports once, then stops; the driver
    // goes on sending its health stream every 200 ms.
    let health = HealthReporter::with_timeout(CHECK_TIMEOUT);
    health.set(NODE, "gpu-0", DeviceHealth::Healthy, "");
    let resources = Resources::new();
    let gpu = Device {
        name: "gpu-0".into(),
        ..Default::default()
    };
    resources.set_pool(NODE, Pool::new(vec![gpu]));
    let shutdown = CancellationToken::new();
    let driver = AllocationEcho {
        cdi_kind: Some(format!("{DRIVER}/gpu")),
    };
    let _driver = DraDriverServer::builder(DRIVER, Arc::new(driver))
        .root_dir(root.path())
        .health(health.clone())
        .health_resend(Duration::from_millis(200))
        .resources(resources)
        .kube(api.client(Identity::Admin).await, NODE)
        .start(shutdown.clone())
        .await
        .unwrap();
    kubelet
        .event(TIMEOUT, "registered", |e| e["name"] == DRIVER)
        .await;

    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
    });
    admin(&api, "POST", CLAIMS, Some(&claim)).await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gpu"},
        "spec": {
            "automountServiceAccountToken": false,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}],
            "containers": [{"name": "main", "image": "example.invalid/app",
                "resources": {"claims": [{"name": "gpu"}]}}],
        },
    });
    admin(&api, "POST", PODS, Some(&pod)).await;
    assert_eq!(api.wait_pod_bound("default", "gpu").await, NODE);
    let prepared = kubelet
        .request(
            TIMEOUT,
            "prepare",
            json!({"namespace": "default", "name": "gpu"}),
        )
        .await;
    assert_eq!(prepared["error"], "", "{prepared}");

    // The checker's last report, now: the claim's binding and prepare may
    // have taken longer than the timeout on a loaded machine.
    health.set(NODE, "gpu-0", DeviceHealth::Healthy, "");
    // Reported healthy while the checker's report holds...
    let healthy = kubelet_health(&mut kubelet).await;
    assert_eq!(healthy, ["Healthy"]);
    // ...then unknown: nobody checked the device within the timeout, though
    // the driver still sends its health every 200 ms.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let health = kubelet_health(&mut kubelet).await;
        if health == ["Unknown"] {
            break;
        }
        assert_eq!(health, ["Healthy"]);
        assert!(tokio::time::Instant::now() < deadline, "still {health:?}");
        // Asked again at the pace of the test support's `eventually`.
        tokio::time::sleep(POLL).await;
    }
    shutdown.cancel();
}

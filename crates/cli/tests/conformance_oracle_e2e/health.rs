//! The health stream behind the kubelet's DRA plugin manager.

use nodeplugins_test_support::wait::TIMEOUT;

use super::dra::{DRIVER, pod_with_claims, with_fault};
use super::{cluster, root};

#[tokio::test(flavor = "multi_thread")]
async fn a_health_stream_silent_at_first_is_a_warning_the_kubelet_prepares_claims_anyway() {
    let api = cluster().await;
    let root = root();
    // Its health stream opens and sends nothing.
    let (mut kubelet, _plugin, registered) =
        with_fault(&api, root.path(), "no-health-message").await;
    assert_eq!(registered["name"], DRIVER);
    assert_eq!(registered["error"], "", "{registered}");
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
}

//! The CSI handler against real CSI drivers on real sockets (spec §5).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodeplugins::PluginHandler;
use nodeplugins::csi::CsiHandler;
use nodeplugins_test_support::fake_csi_driver::FakeCsiDriver;

fn versions(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn validate_follows_the_upstream_version_table() {
    let handler = CsiHandler::default();
    let cases: [(&[&str], bool); 6] = [
        (&["v1.2.3", "boo", "v0.3.0", "2.0.1"], true),
        (&["4.9.12", "2.0.1"], false),
        (&[], false),
        (&["var", "boo", "foo"], false),
        (&["0.3.0"], false),
        (&["1.0.0"], true),
    ];
    for (list, ok) in cases {
        let result = handler
            .validate("csi.example.com", "/x.sock", &versions(list))
            .await;
        assert_eq!(result.is_ok(), ok, "{list:?}: {result:?}");
    }
}

#[tokio::test]
async fn register_records_node_info_and_same_name_needs_a_higher_version() {
    let dir = tempfile::tempdir().unwrap();
    let driver = FakeCsiDriver::serve(
        dir.path().join("csi.sock"),
        "csi.example.com",
        "node-7",
        false,
    )
    .await;
    let endpoint = driver.socket().to_str().unwrap().to_string();
    let handler = CsiHandler::default();
    handler
        .register("csi.example.com", &endpoint, &versions(&["1.0.0"]))
        .await
        .unwrap();
    let stored = handler.drivers().get("csi.example.com").unwrap();
    assert_eq!(stored.node_id, "node-7");
    assert_eq!(stored.max_volumes_per_node, 16);
    assert_eq!(
        stored
            .accessible_topology
            .get("topology.example.com/zone")
            .map(String::as_str),
        Some("z1")
    );
    assert_eq!(stored.version, "1.0.0");

    // Upstream's existing-driver table.
    assert!(
        handler
            .validate("other.example.com", &endpoint, &versions(&["1.0.0"]))
            .await
            .is_ok()
    );
    let same = handler
        .validate("csi.example.com", &endpoint, &versions(&["1.0.0"]))
        .await
        .unwrap_err();
    assert!(
        same.to_string()
            .contains("already registered with a higher supported version"),
        "{same}"
    );
    assert!(
        handler
            .validate("csi.example.com", &endpoint, &versions(&["1.1.0"]))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn node_get_info_failure_fails_registration_and_leaves_no_driver() {
    let dir = tempfile::tempdir().unwrap();
    let driver =
        FakeCsiDriver::serve(dir.path().join("csi.sock"), "bad.example.com", "n", true).await;
    let handler = CsiHandler::new(Duration::from_secs(5));
    let err = handler
        .register(
            "bad.example.com",
            driver.socket().to_str().unwrap(),
            &versions(&["1.0.0"]),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NodeGetInfo failed"), "{err}");
    assert!(handler.drivers().list().is_empty());

    let missing = handler
        .register(
            "gone.example.com",
            "/nonexistent/csi.sock",
            &versions(&["1.0.0"]),
        )
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("dial CSI driver"), "{missing}");
    assert!(handler.drivers().list().is_empty());
}

#[tokio::test]
async fn deregistering_an_old_instance_keeps_the_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    let old = FakeCsiDriver::serve(
        dir.path().join("old.sock"),
        "csi.example.com",
        "node-old",
        false,
    )
    .await;
    let new = FakeCsiDriver::serve(
        dir.path().join("new.sock"),
        "csi.example.com",
        "node-new",
        false,
    )
    .await;
    let (old_ep, new_ep) = (
        old.socket().to_str().unwrap(),
        new.socket().to_str().unwrap(),
    );
    let handler = CsiHandler::default();
    handler
        .register("csi.example.com", old_ep, &versions(&["1.0.0"]))
        .await
        .unwrap();
    handler
        .register("csi.example.com", new_ep, &versions(&["1.1.0"]))
        .await
        .unwrap();
    handler.deregister("csi.example.com", old_ep).await;
    let kept = handler
        .drivers()
        .get("csi.example.com")
        .expect("newer instance must survive");
    assert_eq!(kept.endpoint, new_ep);
    assert_eq!(kept.node_id, "node-new");
    handler.deregister("csi.example.com", new_ep).await;
    assert!(handler.drivers().get("csi.example.com").is_none());
}

#[tokio::test]
async fn a_failed_upgrade_puts_the_working_driver_back() {
    let dir = tempfile::tempdir().unwrap();
    let working = FakeCsiDriver::serve(
        dir.path().join("ok.sock"),
        "csi.example.com",
        "node-ok",
        false,
    )
    .await;
    let broken = FakeCsiDriver::serve(
        dir.path().join("bad.sock"),
        "csi.example.com",
        "node-bad",
        true,
    )
    .await;
    let handler = CsiHandler::new(Duration::from_secs(5));
    let ok_ep = working.socket().to_str().unwrap();
    handler
        .register("csi.example.com", ok_ep, &versions(&["1.0.0"]))
        .await
        .unwrap();
    // A higher version passes validation, but its NodeGetInfo fails.
    assert!(
        handler
            .register(
                "csi.example.com",
                broken.socket().to_str().unwrap(),
                &versions(&["1.5.0"])
            )
            .await
            .is_err()
    );
    let kept = handler
        .drivers()
        .get("csi.example.com")
        .expect("the working driver must be restored");
    assert_eq!(
        (
            kept.endpoint.as_str(),
            kept.node_id.as_str(),
            kept.version.as_str()
        ),
        (ok_ep, "node-ok", "1.0.0")
    );
}

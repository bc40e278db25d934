//! The library entry point, as a plugin author's `cargo test` runs it.

use std::time::Duration;

use nodeplugins_conformance::{Conformance, Verdict};
use nodeplugins_test_support::binaries::binary;

use super::path;

#[tokio::test(flavor = "multi_thread")]
async fn the_library_checks_the_sdk_example_device_plugin_in_cargo_test() {
    let root = tempfile::tempdir().unwrap();
    let report = Conformance::device_plugin(root.path().join("device-plugins"))
        .exec(format!(
            "exec {} --root-dir {} --resource example.com/gpu --devices 4",
            path(&binary("nodeplugins-sdk-bins", "example-device-plugin")),
            path(root.path())
        ))
        .restarts(true)
        .run()
        .await
        .unwrap();
    report.assert_conformant();
    assert_eq!(report.plugin, "example.com/gpu");
    let allocate = report.outcome("device.allocate").unwrap();
    assert!(matches!(allocate.verdict, Verdict::Pass(_)), "{allocate:?}");
}

#[tokio::test(flavor = "multi_thread")]
#[should_panic(expected = "device.allocate: no container response")]
async fn a_failed_rule_fails_the_authors_test_saying_which_and_why() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("device-plugins");
    let report = Conformance::device_plugin(&dir)
        .exec(format!(
            "exec {} device --kubelet-dir {} --fault allocate-no-response",
            path(&binary("nodeplugins-test-support", "faulty-plugin")),
            path(&dir)
        ))
        .rules(["device.allocate"])
        .timeout(Duration::from_secs(2))
        .run()
        .await
        .unwrap();
    // Every other rule is reported, as left out.
    assert!(matches!(
        report.outcome("device.options").unwrap().verdict,
        Verdict::Skip(_)
    ));
    report.assert_conformant();
}

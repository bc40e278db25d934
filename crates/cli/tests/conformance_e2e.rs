//! `nodeplugins conformance` against real plugins, started by the tool
//! (`--exec`): the SDK's example device plugin and DRA driver pass every
//! rule, restarts included; the kubelet's own device plugin stub and a DRA
//! driver on the Go helper pass every rule but the upstream deviations
//! documented here; and a faulty plugin breaking one rule at a time fails
//! (or, where the kubelet copes, warns) exactly that rule.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::claims::allocated_claim;
use common::kube::api_with_nodes;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_programs::go_program;
use serde_json::Value;
use tokio::process::Command;

/// `nodeplugins conformance ARGS -o json`: its exit code and report.
async fn conformance(args: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .arg("conformance")
        .args(args)
        .args(["-o", "json"])
        .output()
        .await
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

fn with(report: &Value, verdict: &str) -> BTreeSet<String> {
    report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["verdict"] == verdict)
        .map(|o| o["id"].as_str().unwrap().to_string())
        .collect()
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A claims file: two claims, and one named `fail-*` that drivers refuse.
fn claims_file(dir: &Path) -> String {
    let file = dir.join("claims.json");
    let claims = serde_json::json!([
        {"uid": "0b7e6e1a-0000-4000-8000-000000000001", "namespace": "default", "name": "claim-a"},
        {"uid": "0b7e6e1a-0000-4000-8000-000000000002", "namespace": "default", "name": "claim-b"},
        {"uid": "0b7e6e1a-0000-4000-8000-000000000003", "namespace": "default", "name": "fail-c", "fails": true},
    ]);
    std::fs::write(&file, claims.to_string()).unwrap();
    path(&file)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_device_plugin_passes_every_rule_restarts_included() {
    let root = tempfile::tempdir().unwrap();
    let kubelet_dir = root.path().join("device-plugins");
    let exec = format!(
        "exec {} --root-dir {} --resource example.com/gpu --devices 4",
        path(&binary("nodeplugins-sdk-bins", "example-device-plugin")),
        path(root.path())
    );
    let junit = root.path().join("junit.xml");
    let (code, report) = conformance(&[
        "--kubelet-dir",
        &path(&kubelet_dir),
        "--exec",
        &exec,
        "--restarts",
        "--junit",
        &path(&junit),
    ])
    .await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(code, Some(0));
    assert!(with(&report, "PASS").contains("device.kubelet-restart"));
    assert!(with(&report, "PASS").contains("device.allocate.unknown-ids"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let rules = report["outcomes"].as_array().unwrap().len();
    assert!(
        xml.contains(&format!(r#"tests="{rules}" failures="0""#)),
        "{xml}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_dra_driver_passes_every_rule_restarts_included() {
    let root = tempfile::tempdir().unwrap();
    let claims = claims_file(root.path());
    let exec = format!(
        "exec {} --root-dir {} --instance {{instance}}",
        path(&binary("nodeplugins-sdk-bins", "example-dra-driver")),
        path(root.path())
    );
    let registry = root.path().join("plugins_registry");
    let (code, report) = conformance(&[
        "--registry",
        &path(&registry),
        "--exec",
        &exec,
        "--restarts",
        "--claims",
        &claims,
    ])
    .await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(with(&report, "SKIP"), ids(&[]), "{report:#}");
    assert_eq!(code, Some(0));
    assert_eq!(report["plugin_type"], "DRAPlugin");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_dra_driver_in_a_cluster_passes_with_claims_from_the_api() {
    let api = api_with_nodes("node-1", &["node-1"]).await;
    allocated_claim(&api, "claim-a", "node-1", "dra.example.com", "gpu-0").await;
    allocated_claim(&api, "claim-b", "node-1", "dra.example.com", "gpu-1").await;
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = path(&api.admin_kubeconfig());
    let exec = format!(
        "exec {} --root-dir {} --kubeconfig {kubeconfig} --node-name node-1 --instance {{instance}}",
        path(&binary("nodeplugins-sdk-bins", "example-dra-driver")),
        path(root.path())
    );
    let (code, report) = conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec,
        "--kubeconfig",
        &kubeconfig,
        "--restarts",
    ])
    .await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(with(&report, "SKIP"), ids(&[]), "{report:#}");
    assert_eq!(code, Some(0));
    let by_uid = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "dra.prepare.by-uid")
        .unwrap();
    assert_eq!(by_uid["detail"], "2 claims answered by UID");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_stub_device_plugin_passes_with_a_warning_for_accepting_any_id() {
    let root = tempfile::tempdir().unwrap();
    let exec = format!(
        "exec {} --kubelet-sock {} --prestart --preferred --watch",
        path(&go_program("stub-device-plugin")),
        path(&root.path().join("kubelet.sock"))
    );
    let (code, report) = conformance(&[
        "--kubelet-dir",
        &path(root.path()),
        "--exec",
        &exec,
        "--restarts",
    ])
    .await;
    // The stub's Allocate answers for whatever ids it is given
    // (pkg/kubelet/cm/devicemanager/plugin/v1beta1/stub.go, Allocate: it
    // builds a response per container request without looking the ids
    // up): the kubelet never sends an id the plugin did not list, so
    // upstream does not test it, and the kubelet works with the stub.
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(
        with(&report, "WARN"),
        ids(&["device.allocate.unknown-ids"]),
        "{report:#}"
    );
    assert_eq!(code, Some(0), "a WARN does not fail the run");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_driver_on_the_go_helper_passes_with_a_warning_for_failing_a_whole_batch_for_one_claim()
 {
    let root = tempfile::tempdir().unwrap();
    let claims = claims_file(root.path());
    let exec = format!(
        "exec {} --instance {{instance}} --registry-dir {} --plugin-dir {} --claims default/claim-a/0b7e6e1a-0000-4000-8000-000000000001,default/claim-b/0b7e6e1a-0000-4000-8000-000000000002",
        path(&go_program("dra-driver")),
        path(&root.path().join("plugins_registry")),
        path(&root.path().join("plugins/gpu.go.example.com")),
    );
    let (code, report) = conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec,
        "--claims",
        &claims,
        "--restarts",
    ])
    .await;
    // The helper reads every claim of a batch before calling the driver,
    // and a claim it cannot read fails the whole call
    // (k8s.io/dynamic-resource-allocation v0.37.2,
    // kubeletplugin/draplugin.go:1293-1296, NodePrepareResources:
    // `return nil, fmt.Errorf("get resource claims: %w", err)`), so the
    // batch's other claims are not prepared either. The kubelet then fails
    // the pod's prepare as a whole, so upstream sees no difference: a
    // WARN, not a failure.
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(
        with(&report, "WARN"),
        ids(&["dra.prepare.per-claim-errors"]),
        "{report:#}"
    );
    assert!(
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == "dra.prepare.per-claim-errors"
                && o["detail"]
                    .as_str()
                    .unwrap()
                    .contains("get resource claims")),
        "{report:#}"
    );
    assert_eq!(code, Some(0));
}

const FAIL: &str = "FAIL";
const WARN: &str = "WARN";

/// Each fault of `faulty-plugin`, the one rule that must catch it, and how:
/// FAIL where the kubelet mishandles such a plugin, WARN where it copes.
const DEVICE_FAULTS: &[(&str, &str, &str)] = &[
    ("register-version", "device.register", FAIL),
    ("serve-after-register", "device.register", FAIL),
    ("options-disagree", "device.options", WARN),
    ("no-list", "device.list-and-watch.first", FAIL),
    ("duplicate-ids", "device.list-and-watch.ids", FAIL),
    ("bad-health", "device.list-and-watch.health", FAIL),
    ("bad-topology", "device.list-and-watch.topology", WARN),
    ("list-once", "device.list-and-watch.stays-open", FAIL),
    ("preferred-wrong-size", "device.preferred-allocation", WARN),
    ("allocate-no-response", "device.allocate", FAIL),
    ("allocate-any-id", "device.allocate.unknown-ids", WARN),
    ("allocate-one-at-a-time", "device.allocate.concurrent", WARN),
    ("pre-start-fails", "device.pre-start-container", FAIL),
    ("no-reregister", "device.kubelet-restart", FAIL),
];

const DRA_FAULTS: &[(&str, &str, &str)] = &[
    ("slow-get-info", "registration.get-info", FAIL),
    ("bad-type", "registration.type", FAIL),
    ("bad-name", "registration.name", WARN),
    ("bad-version", "registration.versions", FAIL),
    ("relative-endpoint", "registration.endpoint", FAIL),
    ("notify-fails", "registration.notify", FAIL),
    (
        "rejection-stops-get-info",
        "registration.survives-rejection",
        WARN,
    ),
    ("unserved-service", "dra.services", WARN),
    ("unserved-chosen-service", "dra.services", FAIL),
    ("extra-claim", "dra.prepare.by-uid", FAIL),
    ("whole-call-error", "dra.prepare.per-claim-errors", WARN),
    ("different-devices-again", "dra.prepare.idempotent", FAIL),
    ("unprepare-unknown-fails", "dra.unprepare.unknown", FAIL),
    ("unprepare-leaves-out", "dra.unprepare.by-uid", FAIL),
    ("unprepare-twice-fails", "dra.unprepare.idempotent", FAIL),
    ("serial-prepare", "dra.prepare.concurrent", WARN),
    ("no-health-message", "dra.health.first", WARN),
    ("ignores-instance", "registration.second-instance", FAIL),
    ("stale-socket", "registration.socket-removed-on-exit", FAIL),
    (
        "no-socket-on-restart",
        "registration.socket-back-on-restart",
        FAIL,
    ),
    ("lose-state-on-restart", "dra.restart.unprepare", FAIL),
];

/// The failed and the warned rules with `PROGRAM MODE --fault FAULT`
/// (`faulty-plugin`).
async fn verdicts_with(
    program: &str,
    mode: &str,
    fault: &str,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let root = tempfile::tempdir().unwrap();
    let fault_flag = if fault.is_empty() {
        String::new()
    } else {
        format!("--fault {fault}")
    };
    let (args, exec) = match mode {
        "device" => (
            vec!["--kubelet-dir".to_string(), path(root.path())],
            format!(
                "exec {program} device --kubelet-dir {} {fault_flag}",
                path(root.path())
            ),
        ),
        _ => {
            let registry = root.path().join("plugins_registry");
            let plugin_dir = root.path().join("plugins/faulty");
            (
                vec![
                    "--registry".to_string(),
                    path(&registry),
                    "--claims".to_string(),
                    claims_file(root.path()),
                ],
                format!(
                    "exec {program} dra --registry-dir {} --plugin-dir {} --instance {{instance}} {fault_flag}",
                    path(&registry),
                    path(&plugin_dir)
                ),
            )
        }
    };
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend([
        "--exec",
        &exec,
        "--restarts",
        "--timeout",
        "2s",
        "--restart-timeout",
        "5s",
    ]);
    let (code, report) = conformance(&all).await;
    let failed = with(&report, "FAIL");
    // A WARN never fails the run.
    assert_eq!(
        code,
        Some(if failed.is_empty() { 0 } else { 1 }),
        "{report:#}"
    );
    (failed, with(&report, "WARN"))
}

/// Runs the plugin without a fault and with each of `faults`, a few at a
/// time, and checks that exactly the fault's rule fails.
async fn each_fault_fails_its_rule(mode: &str, faults: &[(&str, &str, &str)]) {
    use futures::StreamExt;
    let program = path(&binary("nodeplugins-test-support", "faulty-plugin"));
    let program = program.as_str();
    let runs = std::iter::once(("", None))
        .chain(
            faults
                .iter()
                .map(|(fault, rule, verdict)| (*fault, Some((*rule, *verdict)))),
        )
        .map(|(fault, expected)| async move {
            (fault, expected, verdicts_with(program, mode, fault).await)
        });
    let outcomes: Vec<_> = futures::stream::iter(runs)
        .buffer_unordered(3)
        .collect()
        .await;
    for (fault, expected, (failed, warned)) in outcomes {
        let with_verdict = |want: &str| -> BTreeSet<String> {
            expected
                .filter(|(_, verdict)| *verdict == want)
                .map(|(rule, _)| ids(&[rule]))
                .unwrap_or_default()
        };
        assert_eq!(failed, with_verdict(FAIL), "fault {fault:?}: FAIL");
        assert_eq!(warned, with_verdict(WARN), "fault {fault:?}: WARN");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_device_plugin_fault_fails_its_rule_and_only_it() {
    each_fault_fails_its_rule("device", DEVICE_FAULTS).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_dra_driver_fault_fails_its_rule_and_only_it() {
    each_fault_fails_its_rule("dra", DRA_FAULTS).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_helper_gpu_driver_in_a_cluster_passes_with_a_warning_for_failing_a_whole_batch() {
    let api = api_with_nodes("node-1", &["node-1"]).await;
    allocated_claim(&api, "claim-a", "node-1", "dra.example.com", "gpu-0").await;
    allocated_claim(&api, "claim-b", "node-1", "dra.example.com", "gpu-1").await;
    let root = tempfile::tempdir().unwrap();
    let cdi = tempfile::tempdir().unwrap();
    let kubeconfig = path(&api.admin_kubeconfig());
    let exec = format!(
        "NODE_NAME=node-1 KUBECONFIG={kubeconfig} exec {} {} {}",
        path(&go_program("gpu-driver")),
        path(root.path()),
        path(cdi.path())
    );
    let (code, report) = conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec,
        "--kubeconfig",
        &kubeconfig,
        "--restarts",
    ])
    .await;
    // As for dra-driver: the helper fails the whole batch when one claim
    // (here the missing one the tool adds) cannot be read: a WARN.
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(
        with(&report, "WARN"),
        ids(&["dra.prepare.per-claim-errors"]),
        "{report:#}"
    );
    // It has no instance flag: the rolling-update rule cannot start a
    // second one.
    assert_eq!(
        with(&report, "SKIP"),
        ids(&["registration.second-instance"]),
        "{report:#}"
    );
    assert_eq!(code, Some(0));
}

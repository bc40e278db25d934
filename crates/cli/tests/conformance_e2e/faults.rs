//! `faulty-plugin`, breaking one rule at a time: exactly that rule FAILs
//! (or, where the kubelet copes, WARNs).

use std::collections::BTreeSet;

use nodeplugins_test_support::binaries::binary;

use super::{claims_file, conformance, ids, path, with};

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
    ("allocate-bad-response", "device.allocate.response", FAIL),
    ("allocate-any-id", "device.allocate.unknown-ids", WARN),
    ("allocate-one-at-a-time", "device.allocate.concurrent", WARN),
    ("pre-start-fails", "device.pre-start-container", FAIL),
    ("no-reregister", "device.kubelet-restart", FAIL),
    ("no-unlink-on-start", "device.restart-after-kill", FAIL),
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
    // node-driver-registrar's way: exits, its socket left behind, and is
    // started again by its pod; the rules after it meet the new process.
    ("exit-on-rejection", "registration.survives-rejection", WARN),
    ("unserved-service", "dra.services", WARN),
    ("unserved-chosen-service", "dra.services", FAIL),
    ("extra-claim", "dra.prepare.by-uid", FAIL),
    ("bad-cdi-id", "dra.prepare.cdi-ids", FAIL),
    ("whole-call-error", "dra.prepare.per-claim-errors", WARN),
    ("different-devices-again", "dra.prepare.idempotent", FAIL),
    ("unprepare-unknown-fails", "dra.unprepare.unknown", FAIL),
    ("unprepare-leaves-out", "dra.unprepare.by-uid", FAIL),
    ("unprepare-twice-fails", "dra.unprepare.idempotent", FAIL),
    ("serial-prepare", "dra.prepare.concurrent", WARN),
    ("no-health-message", "dra.health.first", WARN),
    ("ignores-instance", "registration.second-instance", WARN),
    ("stale-socket", "registration.socket-removed-on-exit", FAIL),
    (
        "no-socket-on-restart",
        "registration.socket-back-on-restart",
        FAIL,
    ),
    ("lose-state-on-restart", "dra.restart.unprepare", FAIL),
    (
        "no-unlink-on-start",
        "registration.restart-after-kill",
        FAIL,
    ),
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

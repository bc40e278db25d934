//! `nodeplugins conformance` against real plugins, started by the tool
//! (`--exec`): the SDK's example device plugin and DRA driver pass every
//! rule, restarts included; the kubelet's own device plugin stub and a DRA
//! driver on the Go helper pass every rule but the upstream deviations
//! documented here; and a faulty plugin breaking one rule at a time fails
//! (or, where the kubelet copes, warns) exactly that rule.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod faults;
mod library;
mod plugins;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tokio::process::Command;

/// `nodeplugins conformance ARGS -o json`: its exit code and report.
pub(crate) async fn conformance(args: &[&str]) -> (Option<i32>, Value) {
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

pub(crate) fn with(report: &Value, verdict: &str) -> BTreeSet<String> {
    report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["verdict"] == verdict)
        .map(|o| o["id"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub(crate) fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A claims file: two claims, and one named `fail-*` that drivers refuse.
pub(crate) fn claims_file(dir: &Path) -> String {
    let file = dir.join("claims.json");
    let claims = serde_json::json!([
        {"uid": "0b7e6e1a-0000-4000-8000-000000000001", "namespace": "default", "name": "claim-a"},
        {"uid": "0b7e6e1a-0000-4000-8000-000000000002", "namespace": "default", "name": "claim-b"},
        {"uid": "0b7e6e1a-0000-4000-8000-000000000003", "namespace": "default", "name": "fail-c", "fails": true},
    ]);
    std::fs::write(&file, claims.to_string()).unwrap();
    path(&file)
}

//! A reader that goes away (`nodeplugins status -o json | head -c 5`) ends
//! every command's output quietly: exit 0, nothing on stderr, for tables and
//! JSON alike, however large the output. The agent has 80 DRA driver
//! instances, so each listing is larger than a pipe holds.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::Path;

use nodeplugins_test_support::fake_dra_driver::{FakeDraDriver, FakeDraOptions};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

const INSTANCES: usize = 80;

/// Runs `nodeplugins ARGS --root-dir ROOT` with stdout a pipe whose reader
/// is already closed, so that its first write fails; returns the output.
fn with_closed_stdout(root: &Path, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std::process::Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(args)
        .arg("--root-dir")
        .arg(root)
        .stdout(writer)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_listing_ends_quietly_when_its_reader_is_gone() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent_with(root.path(), &["--log-level", "warn"]);
    let mut drivers = Vec::new();
    for i in 0..INSTANCES {
        let mut options = FakeDraOptions::new(&format!("dra-{i}.example.com"), "pod-a");
        options.register = true;
        drivers.push(FakeDraDriver::start(root.path(), options).await);
    }
    eventually("every driver registered", TIMEOUT, || async {
        let status = status_json(root.path()).await?;
        (status["dra_drivers"].as_array()?.len() == INSTANCES).then_some(status)
    })
    .await;
    let json = cli(root.path(), &["status", "-o", "json"]).await;
    assert!(
        json.stdout.len() > 65536,
        "larger than a pipe holds: {} bytes",
        json.stdout.len()
    );

    let listings: &[&[&str]] = &[
        &["status"],
        &["dra", "drivers"],
        &["dra", "claims"],
        &["resources"],
        &["pod-resources"],
        &["pod-resources", "--allocatable"],
        &["events"],
    ];
    for listing in listings {
        for json in [false, true] {
            let mut args = listing.to_vec();
            if json {
                args.extend(["-o", "json"]);
            }
            let out = with_closed_stdout(root.path(), &args);
            assert!(
                out.status.success(),
                "{args:?}: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stderr),
                "",
                "{args:?}: nothing on stderr"
            );
        }
    }
}

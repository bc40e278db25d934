//! A reader that goes away (`nodeplugins status -o json | head -c 5`) ends
//! every command's output quietly: exit 0, nothing on stderr, for tables and
//! JSON alike, however large the output. The agent has 300 DRA driver
//! instances, so the largest listings are larger than a pipe holds, and the
//! reader goes away both before the first write and after reading 5 bytes
//! of a listing still being written.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::io::Read;
use std::path::Path;

use nodeplugins_test_support::fake_dra_driver::{FakeDraDriver, FakeDraOptions};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

const INSTANCES: usize = 300;
/// What a pipe holds on Linux by default: a listing larger than this is
/// still being written when its reader goes away.
const PIPE_CAPACITY: usize = 65536;

/// Every listing command.
const LISTINGS: &[&[&str]] = &[
    &["status"],
    &["dra", "drivers"],
    &["dra", "claims"],
    &["resources"],
    &["pod-resources"],
    &["pod-resources", "--allocatable"],
    &["events"],
];

/// An agent with `INSTANCES` DRA driver instances registered.
struct Node {
    // Dropped first: the drivers before the agent and the root.
    _drivers: Vec<FakeDraDriver>,
    _agent: ChildProcess,
    root: tempfile::TempDir,
}

async fn node() -> Node {
    let root = tempfile::tempdir().unwrap();
    let agent = agent_with(root.path(), &["--log-level", "warn"]);
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
    Node {
        _drivers: drivers,
        _agent: agent,
        root,
    }
}

/// How the reader of `nodeplugins`'s stdout goes away.
#[derive(Debug, Clone, Copy)]
enum Reader {
    /// Closed before the command starts: its first write fails.
    ClosedAtOnce,
    /// Reads 5 bytes, then closes, as `head -c 5` does.
    GoneAfterFiveBytes,
}

/// Runs `nodeplugins ARGS --root-dir ROOT` with its stdout read by
/// `reader`; returns the exit status and what it wrote on stderr.
fn run(root: &Path, args: &[&str], reader: Reader) -> (std::process::ExitStatus, String) {
    let (mut pipe_reader, writer) = std::io::pipe().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .args(args)
        .arg("--root-dir")
        .arg(root)
        .stdout(writer)
        .stderr(std::process::Stdio::piped());
    match reader {
        Reader::ClosedAtOnce => drop(pipe_reader),
        Reader::GoneAfterFiveBytes => {
            let child = command.spawn().unwrap();
            // The command's copy of the write end is closed with it.
            drop(command);
            let mut first = [0u8; 5];
            pipe_reader.read_exact(&mut first).unwrap();
            drop(pipe_reader);
            let out = child.wait_with_output().unwrap();
            return (out.status, String::from_utf8_lossy(&out.stderr).into());
        }
    }
    let out = command.output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into())
}

/// Every listing, in `form` (`-o json` or the table), ends quietly for
/// either reader; at least `large` of them are larger than a pipe holds.
async fn every_listing_ends_quietly(json: bool, large: &[&[&str]]) {
    let node = node().await;
    let root = node.root.path();
    let with_form = |listing: &[&str]| {
        let mut args: Vec<String> = listing.iter().map(|a| a.to_string()).collect();
        if json {
            args.extend(["-o".into(), "json".into()]);
        }
        args
    };
    for listing in large {
        let args = with_form(listing);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let whole = cli(root, &args).await;
        assert!(
            whole.status.success() && whole.stdout.len() > PIPE_CAPACITY,
            "{args:?} is larger than a pipe holds: {} bytes",
            whole.stdout.len()
        );
    }
    for listing in LISTINGS {
        let args = with_form(listing);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for reader in [Reader::ClosedAtOnce, Reader::GoneAfterFiveBytes] {
            if matches!(reader, Reader::GoneAfterFiveBytes) {
                // Only a listing with 5 bytes to read can lose its reader
                // after them.
                let whole = cli(root, &args).await;
                if whole.stdout.len() < 5 {
                    continue;
                }
            }
            let (status, stderr) = run(root, &args, reader);
            assert!(status.success(), "{args:?}, {reader:?}: {status} {stderr}");
            assert_eq!(stderr, "", "{args:?}, {reader:?}: nothing on stderr");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tables_end_quietly_when_their_reader_is_gone() {
    every_listing_ends_quietly(false, &[&["status"], &["events"]]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_ends_quietly_when_its_reader_is_gone() {
    every_listing_ends_quietly(true, &[&["status"], &["dra", "drivers"], &["events"]]).await;
}

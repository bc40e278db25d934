//! Plugins that crash at each step of their protocols, against `nodeplugins
//! run`. The plugins are grpcio processes that exit on the spot inside the
//! chosen call (`--crash-at STEP[:N]`), leaving their sockets behind, or
//! block in it forever (`--hang-at STEP[:N]`). Each
//! case checks that the agent keeps running, that its state says what
//! happened, that nothing recorded before the crash is lost, and that the
//! plugin, restarted on the same socket, works again.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod device_plugins;
mod dra_drivers;
mod registration;

use common::*;

use std::path::Path;

use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

/// Starts a grpcio plugin script and waits for it to crash at `step`.
async fn expect_crash(mut plugin: ChildProcess, step: &str) {
    let step = step.split(':').next().unwrap().to_string();
    plugin
        .wait_for_line(TIMEOUT, |l| l == format!("CRASH {step}"))
        .await;
    assert_eq!(plugin.wait(TIMEOUT).await, Some(3), "it crashed at {step}");
}

async fn agent_up(root: &Path) -> ChildProcess {
    let agent = agent(root);
    eventually("agent answering", TIMEOUT, || status_json(root)).await;
    agent
}

//! DRA end to end with separate processes: `example-dra-driver` and a grpcio
//! driver against `nodeplugins run`, through the CLI: prepare and unprepare,
//! device health, a rolling update with no failed prepare, and cleanup after
//! the grace period.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod events_and_metrics;
mod prepare;
mod restarts;

use std::path::Path;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use tokio::process::Command;

const DRIVER: &str = "dra.example.com";

fn example_driver(root: &Path, instance: Option<&str>) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    command.arg("--root-dir").arg(root);
    if let Some(id) = instance {
        command.args(["--instance", id]);
    }
    ChildProcess::spawn("example-dra-driver", command)
}

fn connected(d: &serde_json::Value, endpoint_part: &str) -> bool {
    d["instances"].as_array().is_some_and(|list| {
        list.iter().any(|i| {
            i["connected"] == true
                && i["endpoint"]
                    .as_str()
                    .is_some_and(|e| e.contains(endpoint_part))
        })
    })
}

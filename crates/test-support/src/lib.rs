//! Test support for nodeplugins: real plugins and a real kubelet-side client
//! to test against, the Python grpcio environment for interop tests, a real
//! kube-apiserver on loopback, and condition waits.
//!
//! Nothing here is a mock: every fake serves or calls real gRPC over real Unix
//! sockets through the same transport as production code.
// Test code: a failed expectation should stop the test with its location.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]
#![forbid(unsafe_code)]

pub mod binaries;
pub mod client_certificates;
pub mod containerd;
pub mod control_plane;
mod control_process;
pub mod echo_dra_driver;
pub mod fake_csi_driver;
pub mod fake_device_plugin;
pub mod fake_dra_driver;
pub mod fake_kubelet;
pub mod fake_plugin;
pub mod go_process;
pub mod go_programs;
pub mod kube_api;
pub mod logind;
pub mod metrics_server;
pub mod mounts;
pub mod oci_image;
pub mod process;
pub mod python;
pub mod real_kubelet;
pub mod shared_dir;
pub mod sim_node;
pub mod stats;
pub mod wait;

/// Installs a test log subscriber once (honours `RUST_LOG`).
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_test_writer()
        .try_init();
}

//! A CSI driver on a socket: the SDK's CSI node driver server with test values.

use std::path::{Path, PathBuf};

use nodeplugins_api::transport::{BoundSocket, serve};
use nodeplugins_sdk::csi_driver::CsiNodeDriver;
use tokio_util::sync::CancellationToken;

/// A running CSI driver.
pub struct FakeCsiDriver {
    socket: PathBuf,
    shutdown: CancellationToken,
}

impl FakeCsiDriver {
    /// Serves driver `name` reporting `node_id`, 16 volumes and zone `z1`;
    /// with `fail_node_get_info`, NodeGetInfo answers UNAVAILABLE.
    pub async fn serve(
        socket: impl Into<PathBuf>,
        name: &str,
        node_id: &str,
        fail_node_get_info: bool,
    ) -> Self {
        let socket = socket.into();
        let mut driver = CsiNodeDriver::new(name, node_id)
            .vendor_version("0.0.1")
            .max_volumes_per_node(16)
            .topology("topology.example.com/zone", "z1");
        if fail_node_get_info {
            driver = driver.failing_node_get_info();
        }
        let bound = BoundSocket::bind(&socket, None)
            .await
            .expect("bind fake CSI driver");
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(bound, driver.router(), shutdown.clone()));
        Self { socket, shutdown }
    }

    /// The driver's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for FakeCsiDriver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

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
        let driver = CsiNodeDriver {
            name: name.into(),
            vendor_version: "0.0.1".into(),
            node_id: node_id.into(),
            max_volumes_per_node: 16,
            topology: [("topology.example.com/zone".to_string(), "z1".to_string())].into(),
            fail_node_get_info,
        };
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

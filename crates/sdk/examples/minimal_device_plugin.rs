//! The smallest useful device plugin: two devices, registered through the
//! kubelet's `kubelet.sock`, re-registering by itself when the kubelet
//! restarts.
//!
//! Run: `cargo run -p nodeplugins-sdk --example minimal_device_plugin -- /tmp/root`

use nodeplugins_sdk::api::deviceplugin::v1beta1::{ContainerAllocateResponse, Device};
use nodeplugins_sdk::device_plugin::{DevicePluginServer, DevicePluginService, Devices};
use nodeplugins_sdk::signals::shutdown_on_signals;
use nodeplugins_sdk::tonic::Status;

struct Plugin;

#[nodeplugins_sdk::async_trait]
impl DevicePluginService for Plugin {
    async fn allocate(&self, devices: Vec<String>) -> Result<ContainerAllocateResponse, Status> {
        Ok(ContainerAllocateResponse {
            envs: [("MINIMAL_DEVICES".to_string(), devices.join(","))].into(),
            ..Default::default()
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/var/lib/kubelet".into());
    let devices = Devices::new(
        ["dev-0", "dev-1"]
            .iter()
            .map(|id| Device {
                id: id.to_string(),
                health: "Healthy".into(),
                topology: None,
            })
            .collect(),
    );
    let plugin = DevicePluginServer::builder("minimal.example.com/device", Plugin)
        .root_dir(&root)
        .socket_name("minimal.sock")
        .devices(devices)
        .start(shutdown_on_signals()?)
        .await?;
    plugin.wait().await?;
    Ok(())
}

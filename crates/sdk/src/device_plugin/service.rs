//! The trait a device plugin author implements.

use nodeplugins_api::deviceplugin::v1beta1 as dp;
use tonic::Status;

use crate::cdi::ContainerEdits;

/// What a device plugin author implements.
#[async_trait::async_trait]
pub trait DevicePluginService: Send + Sync + 'static {
    /// Prepares `devices` for one container and says how to expose them.
    /// Every id is one the plugin lists: an Allocate naming another is
    /// refused (InvalidArgument) before this is called.
    async fn allocate(&self, devices: Vec<String>)
    -> Result<dp::ContainerAllocateResponse, Status>;

    /// Picks `size` devices from `available`, including `must_include`; `None`
    /// (the default) means the plugin has no preference and does not offer it.
    async fn preferred_allocation(
        &self,
        _available: &[String],
        _must_include: &[String],
        _size: usize,
    ) -> Option<Vec<String>> {
        None
    }

    /// Whether [`preferred_allocation`](Self::preferred_allocation) is implemented.
    fn offers_preferred_allocation(&self) -> bool {
        false
    }

    /// Called before each container start when [`pre_start_required`](Self::pre_start_required).
    async fn pre_start_container(&self, _devices: Vec<String>) -> Result<(), Status> {
        Ok(())
    }

    /// Whether the kubelet must call PreStartContainer.
    fn pre_start_required(&self) -> bool {
        false
    }

    /// What a container gets for `device` through CDI (environment, device
    /// nodes, mounts), when the plugin serves with
    /// [`cdi`](super::DevicePluginBuilder::cdi): the device is written in
    /// the CDI spec and named in every Allocate answer that includes it.
    /// `None` (the default): the device has no CDI device, and Allocate's
    /// own answer is all the container gets.
    fn container_edits(&self, _device: &str) -> Option<ContainerEdits> {
        None
    }
}

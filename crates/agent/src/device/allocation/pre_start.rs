//! PreStartContainer, right before a container that holds devices starts
//! (each start and restart), as the kubelet calls it when it makes the
//! container's run options: for each resource the container holds, the
//! resource's plugin instance in use is asked, when it asked for the call
//! at registration, with the container's devices of that resource.

use crate::common::owner::Mailbox;
use crate::device::allocation::allocate_error::AllocateError;
use crate::device::command::{Command, Shared};

/// Calls PreStartContainer for container `container` of pod `pod_uid`,
/// resource by resource, as recorded; the first failure ends the calls.
/// A container holding nothing costs no call.
pub(crate) async fn pre_start(
    commands: &Mailbox<Command>,
    shared: &Shared,
    pod_uid: &str,
    container: &str,
) -> Result<(), AllocateError> {
    let snapshot = shared.store.get();
    let held: Vec<_> = snapshot
        .allocations_of(pod_uid)
        .iter()
        .filter(|a| a.container == container && !a.devices.is_empty())
        .cloned()
        .collect();
    for allocation in held {
        let resource = allocation.resource.clone();
        if commands.is_closed() {
            return Err(AllocateError::Stopping);
        }
        let plugin = shared
            .book
            .instance(&resource)
            // The kubelet: "endpoint not found in cache for a registered
            // resource"; the start waits for the plugin.
            .ok_or_else(|| AllocateError::Unregistered(resource.clone()))?;
        plugin
            .pre_start_container(&allocation.devices)
            .await
            .map_err(|source| AllocateError::PreStart { resource, source })?;
    }
    Ok(())
}

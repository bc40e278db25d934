//! The node's ResourceSlices, withdrawn as the kubelet does: all of them when
//! the agent starts (no driver can serve them yet), and a driver's when none
//! of its instances has been connected for the grace period. The DRA manager
//! calls this hook and retries it with backoff (1 s doubling to 5 min) until
//! it succeeds or the driver comes back; a NotFound counts as done.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams};
use tokio::sync::oneshot;

use super::error::{KubeApiError, request};
use super::publisher::Command;
use crate::dra::{CleanupError, DriverCleanup};
use crate::owner::Mailbox;

/// The field selector of the node's slices, or of one driver's on the node.
pub fn field_selector(node: &str, driver: Option<&str>) -> String {
    match driver {
        Some(driver) => format!("spec.nodeName={node},spec.driver={driver}"),
        None => format!("spec.nodeName={node}"),
    }
}

/// Deletes the slices `field_selector` selects.
pub(crate) async fn delete(
    client: &kube::Client,
    selector: &str,
    timeout: Duration,
) -> Result<(), KubeApiError> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let params = ListParams::default().fields(selector);
    let result = request(
        || format!("delete resourceslices {selector}"),
        timeout,
        slices.delete_collection(&DeleteParams::default(), &params),
    )
    .await;
    match result {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}

/// The DRA cleanup hook that deletes ResourceSlices through the API
/// publisher (which counts and reports the writes).
#[derive(Clone)]
pub struct ResourceSliceCleanup {
    pub(crate) commands: Mailbox<Command>,
}

impl ResourceSliceCleanup {
    async fn delete(&self, driver: Option<String>) -> Result<(), CleanupError> {
        let (reply, done) = oneshot::channel();
        self.commands
            .send(Command::DeleteSlices { driver, reply })
            .map_err(|_| CleanupError("the API publisher is not running".into()))?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(CleanupError(e.to_string())),
            Err(_) => Err(CleanupError("the API publisher stopped".into())),
        }
    }
}

#[async_trait::async_trait]
impl DriverCleanup for ResourceSliceCleanup {
    async fn node_started(&self) -> Result<(), CleanupError> {
        self.delete(None).await
    }

    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        self.delete(Some(driver.to_string())).await
    }
}

/// The result a deletion reports back.
pub(crate) type Deleted = oneshot::Sender<Result<(), Arc<KubeApiError>>>;

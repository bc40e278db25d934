//! The node's ResourceSlices, withdrawn as the kubelet does: all of them when
//! the agent starts (no driver can serve them yet), and a driver's when none
//! of its instances has been connected for the grace period. The DRA
//! manager's cleanup scheduler owns the wipe: it calls this hook, retries it
//! with backoff (1 s doubling to 5 min) until it succeeds or the driver
//! comes back, and drops a call in progress when the driver comes back,
//! which drops its request. A NotFound counts as done. Each outcome is
//! reported to the publisher, which counts it and shows it in status.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams};
use tokio::sync::{mpsc, watch};

use super::credentials::Connection;
use super::error::{KubeApiError, request};
use crate::dra::{CleanupError, DriverCleanup};

/// The field selector of the node's slices, or of one driver's on the node.
pub(super) fn field_selector(node: &str, driver: Option<&str>) -> String {
    match driver {
        Some(driver) => format!("spec.nodeName={node},spec.driver={driver}"),
        None => format!("spec.nodeName={node}"),
    }
}

/// Deletes the slices `field_selector` selects.
pub(crate) async fn delete(client: &kube::Client, selector: &str) -> Result<(), KubeApiError> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let params = ListParams::default().fields(selector);
    let result = request(
        || format!("delete resourceslices {selector}"),
        slices.delete_collection(&DeleteParams::default(), &params),
    )
    .await;
    match result {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}

/// How one wipe ended, for the publisher's counts and status.
pub(crate) type WipeReport = Result<(), Arc<KubeApiError>>;

/// The DRA cleanup hook that deletes the node's ResourceSlices.
#[derive(Clone)]
pub struct ResourceSliceCleanup {
    pub(crate) connection: watch::Receiver<Connection>,
    pub(crate) node: String,
    pub(crate) reports: mpsc::UnboundedSender<WipeReport>,
}

impl ResourceSliceCleanup {
    async fn delete(&self, driver: Option<&str>) -> Result<(), CleanupError> {
        let client = self.connection.borrow().client.clone();
        let selector = field_selector(&self.node, driver);
        let result = delete(&client, &selector).await.map_err(Arc::new);
        let _ = self.reports.send(result.clone());
        result.map_err(|e| CleanupError(Box::new(e)))
    }
}

#[async_trait::async_trait]
impl DriverCleanup for ResourceSliceCleanup {
    async fn node_started(&self) -> Result<(), CleanupError> {
        self.delete(None).await
    }

    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        self.delete(Some(driver)).await
    }
}

//! The node's ResourceSlices, withdrawn as the kubelet does: all of them when
//! the agent starts (no driver can serve them yet), and a driver's when none
//! of its instances has been connected for the grace period. The DRA
//! manager's cleanup scheduler owns the wipe: it calls this hook, retries it
//! with backoff (1 s doubling to 5 min) until it succeeds or the driver
//! comes back, and drops a call in progress when the driver comes back,
//! which drops its request. A NotFound counts as done. Each outcome is
//! counted and shows in the publisher's status, and a failure or a
//! recovery is said once.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams};
use tokio::sync::watch;

use nodeplugins_api::retry::{Retry, Said};

use super::error::{KubeApiError, request};
use super::status::WriteKind;
use crate::dra::{CleanupError, DriverCleanup};
use crate::kube_api::client::credentials::Connection;
use crate::kube_api::writes::report::{Reporter, Standing};

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

/// Failed wipes in a row, and why the last one failed: one record for
/// every clone of the hook.
pub(crate) type WipeFailures = Arc<Mutex<Retry<Arc<KubeApiError>>>>;

/// The DRA cleanup hook that deletes the node's ResourceSlices.
#[derive(Clone)]
pub struct ResourceSliceCleanup {
    pub(crate) connection: watch::Receiver<Connection>,
    pub(crate) node: String,
    pub(crate) reporter: Reporter,
    pub(crate) failures: WipeFailures,
}

impl ResourceSliceCleanup {
    async fn delete(&self, driver: Option<&str>) -> Result<(), CleanupError> {
        let client = self.connection.borrow().client.clone();
        let selector = field_selector(&self.node, driver);
        let result = delete(&client, &selector).await.map_err(Arc::new);
        self.report(&result);
        result.map_err(|e| CleanupError(Box::new(e)))
    }

    /// Counts a wipe that ended with `result`, shows its failures in the
    /// status, and says a new failure or a recovery once.
    pub(crate) fn report(&self, result: &Result<(), Arc<KubeApiError>>) {
        let (said, error) = {
            let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            let said: Said = match result {
                Ok(()) => failures.succeeded(),
                Err(error) => failures.record(error.clone()),
            };
            self.reporter
                .stands(WriteKind::ResourceSlices, Standing::of_retry(&failures));
            (said, failures.last_error().cloned())
        };
        self.reporter
            .finished(WriteKind::ResourceSlices, said, error);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    #[tokio::test]
    async fn wipe_failures_show_until_a_wipe_succeeds() {
        let (reporter, mut events) = Reporter::detached("node-1");
        let cleanup = ResourceSliceCleanup {
            connection: watch::channel(Connection {
                client: kube::Client::try_from(kube::Config::new(
                    "http://127.0.0.1:9".parse().unwrap(),
                ))
                .unwrap(),
                server: String::new(),
            })
            .1,
            node: "node-1".into(),
            reporter: reporter.clone(),
            failures: WipeFailures::default(),
        };
        let failed = Arc::new(KubeApiError::NoNode("node-1".into()));
        cleanup.report(&Err(failed.clone()));
        cleanup.report(&Err(failed));
        let status = reporter.status();
        assert!(status.pending.contains(&WriteKind::ResourceSlices));
        assert_eq!(status.failures, 2);
        assert_eq!(Reporter::kinds(&mut events), vec![EventKind::WriteFailed]);

        cleanup.report(&Ok(()));
        let status = reporter.status();
        assert!(!status.pending.contains(&WriteKind::ResourceSlices));
        assert_eq!(status.failures, 0);
        assert!(status.last_success_unix_ms.is_some());
        assert_eq!(Reporter::kinds(&mut events), vec![EventKind::CaughtUp]);
    }
}

//! Device health the driver reports, and the `DRAResourceHealth` streams
//! (v1 and v1alpha1) that send it to the agent.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::Stream;
use nodeplugins_api::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// The default interval at which device health is sent again unchanged, so
/// the agent's view never goes stale.
pub const HEALTH_RESEND_INTERVAL: Duration = Duration::from_secs(10);
/// The timeout sent with each device's health: three resend intervals.
pub const HEALTH_TIMEOUT_SECONDS: i64 = 30;

/// (pool, device) → (health, message).
type HealthTable = BTreeMap<(String, String), (health_v1::HealthStatus, String)>;

/// Device health the driver reports; every change goes out at once on the
/// `DRAResourceHealth` streams.
#[derive(Clone)]
pub struct HealthReporter {
    tx: Arc<watch::Sender<HealthTable>>,
}

impl Default for HealthReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl HealthReporter {
    /// A reporter with no devices.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(BTreeMap::new()).0),
        }
    }

    /// Sets the health of `device` in `pool`, with an explanation.
    pub fn set(
        &self,
        pool: &str,
        device: &str,
        health: health_v1::HealthStatus,
        message: impl Into<String>,
    ) {
        let message = message.into();
        let key = (pool.to_string(), device.to_string());
        self.tx.send_if_modified(|devices| {
            let value = (health, message);
            if devices.get(&key) == Some(&value) {
                return false;
            }
            devices.insert(key, value);
            true
        });
    }

    /// The current report, stamped now.
    pub fn snapshot(&self) -> health_v1::NodeWatchResourcesResponse {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        health_v1::NodeWatchResourcesResponse {
            devices: self
                .tx
                .borrow()
                .iter()
                .map(
                    |((pool, device), (health, message))| health_v1::DeviceHealth {
                        device: Some(health_v1::DeviceIdentifier {
                            pool_name: pool.clone(),
                            device_name: device.clone(),
                        }),
                        health: *health as i32,
                        last_updated_time: now,
                        health_check_timeout_seconds: HEALTH_TIMEOUT_SECONDS,
                        message: message.clone(),
                    },
                )
                .collect(),
        }
    }
}

type HealthStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The health list now, then on every change and every `resend` interval.
fn health_stream(
    reporter: HealthReporter,
    resend: Duration,
) -> HealthStream<health_v1::NodeWatchResourcesResponse> {
    let changes = reporter.tx.subscribe();
    Box::pin(futures::stream::unfold(
        (reporter, changes, true),
        move |(reporter, mut changes, first)| async move {
            if !first {
                tokio::select! {
                    changed = changes.changed() => changed.ok()?,
                    () = tokio::time::sleep(resend) => {}
                }
            }
            changes.borrow_and_update();
            let snapshot = reporter.snapshot();
            Some((Ok(snapshot), (reporter, changes, false)))
        },
    ))
}

pub(super) struct HealthV1 {
    pub(super) reporter: HealthReporter,
    pub(super) resend: Duration,
}

#[tonic::async_trait]
impl health_v1::dra_resource_health_server::DraResourceHealth for HealthV1 {
    type NodeWatchResourcesStream = HealthStream<health_v1::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _: Request<health_v1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(health_stream(
            self.reporter.clone(),
            self.resend,
        )))
    }
}

pub(super) struct HealthV1alpha1 {
    pub(super) reporter: HealthReporter,
    pub(super) resend: Duration,
}

#[tonic::async_trait]
impl health_v1alpha1::dra_resource_health_server::DraResourceHealth for HealthV1alpha1 {
    type NodeWatchResourcesStream = HealthStream<health_v1alpha1::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _: Request<health_v1alpha1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        use futures::StreamExt;
        let stream = health_stream(self.reporter.clone(), self.resend)
            .map(|message| message.map(Into::into));
        Ok(Response::new(Box::pin(stream)))
    }
}

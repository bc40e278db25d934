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
/// the agent's view never goes stale while the driver is there.
pub const HEALTH_RESEND_INTERVAL: Duration = Duration::from_secs(10);
/// The default health check timeout, sent with each device's health: three
/// resend intervals.
pub const HEALTH_TIMEOUT_SECONDS: i64 = 30;

/// A device's health as the driver sees it. (The wire's enum stays
/// inside the SDK, as the Go helper keeps it: a plugin's code does not
/// change with the API's version.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceHealth {
    /// Works.
    Healthy,
    /// Does not work: the kubelet marks the containers using it.
    Unhealthy,
    /// Not known (its check failed or did not run).
    Unknown,
}

impl DeviceHealth {
    fn wire(self) -> health_v1::HealthStatus {
        match self {
            Self::Healthy => health_v1::HealthStatus::Healthy,
            Self::Unhealthy => health_v1::HealthStatus::Unhealthy,
            Self::Unknown => health_v1::HealthStatus::Unknown,
        }
    }
}

/// What was last reported of one device.
#[derive(Debug, Clone, PartialEq)]
struct Report {
    health: DeviceHealth,
    message: String,
    /// When the driver last reported it (with [`HealthReporter::set`]).
    at: SystemTime,
}

/// (pool, device) → its report.
type HealthTable = BTreeMap<(String, String), Report>;

struct Shared {
    table: watch::Sender<HealthTable>,
    timeout: Duration,
}

/// Device health the driver reports; every change goes out at once on the
/// `DRAResourceHealth` streams.
///
/// Each device is sent with the time the driver last reported it
/// (`lastUpdatedTime`) and the reporter's timeout. A health checker reports
/// every device at least once per timeout, changed or not; a device whose
/// last report is older than the timeout (its checker stopped or hangs) is
/// sent as `Unknown`, so that the kubelet does not go on trusting a health
/// nobody checks. A removed device is no longer sent: the kubelet lets its
/// last health time out.
#[derive(Clone)]
pub struct HealthReporter {
    shared: Arc<Shared>,
}

impl Default for HealthReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl HealthReporter {
    /// A reporter with no devices and the default timeout
    /// ([`HEALTH_TIMEOUT_SECONDS`]).
    pub fn new() -> Self {
        Self::with_timeout(Duration::from_secs(HEALTH_TIMEOUT_SECONDS as u64))
    }

    /// A reporter with no devices whose reports count for `timeout`
    /// (rounded down to whole seconds on the wire; at least one second).
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                table: watch::channel(BTreeMap::new()).0,
                timeout: timeout.max(Duration::from_secs(1)),
            }),
        }
    }

    /// The timeout sent with each device.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Reports the health of `device` in `pool` now, with an explanation.
    /// A change goes out at once; the same health again renews the report
    /// (its time goes out with the next resend).
    pub fn set(&self, pool: &str, device: &str, health: DeviceHealth, message: impl Into<String>) {
        self.set_at(pool, device, health, message.into(), SystemTime::now());
    }

    fn set_at(
        &self,
        pool: &str,
        device: &str,
        health: DeviceHealth,
        message: String,
        at: SystemTime,
    ) {
        let key = (pool.to_string(), device.to_string());
        self.shared.table.send_if_modified(|devices| {
            let changed = devices
                .get(&key)
                .is_none_or(|r| r.health != health || r.message != message);
            devices.insert(
                key,
                Report {
                    health,
                    message,
                    at,
                },
            );
            changed
        });
    }

    /// Stops reporting `device` in `pool`.
    pub fn remove(&self, pool: &str, device: &str) {
        let key = (pool.to_string(), device.to_string());
        self.shared
            .table
            .send_if_modified(|devices| devices.remove(&key).is_some());
    }

    /// The current report as sent now.
    pub fn snapshot(&self) -> health_v1::NodeWatchResourcesResponse {
        self.snapshot_at(SystemTime::now())
    }

    /// The report as sent at `now`: each device with the time of its last
    /// report, `Unknown` once that is older than the timeout.
    fn snapshot_at(&self, now: SystemTime) -> health_v1::NodeWatchResourcesResponse {
        let timeout = self.shared.timeout;
        let devices = self.shared.table.borrow();
        health_v1::NodeWatchResourcesResponse {
            devices: devices
                .iter()
                .map(|((pool, device), report)| {
                    let stale = now.duration_since(report.at).is_ok_and(|age| age > timeout);
                    let (health, message) = if stale {
                        let message = format!("no health check for over {}s", timeout.as_secs());
                        (DeviceHealth::Unknown, message)
                    } else {
                        (report.health, report.message.clone())
                    };
                    health_v1::DeviceHealth {
                        device: Some(health_v1::DeviceIdentifier {
                            pool_name: pool.clone(),
                            device_name: device.clone(),
                        }),
                        health: health.wire() as i32,
                        last_updated_time: unix_seconds(report.at),
                        health_check_timeout_seconds: timeout.as_secs() as i64,
                        message,
                    }
                })
                .collect(),
        }
    }
}

fn unix_seconds(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

type HealthStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The health list now, then on every change and every `resend` interval.
fn health_stream(
    reporter: HealthReporter,
    resend: Duration,
) -> HealthStream<health_v1::NodeWatchResourcesResponse> {
    let changes = reporter.shared.table.subscribe();
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

#[cfg(test)]
mod tests {
    use super::*;
    use health_v1::HealthStatus;

    fn sent(reporter: &HealthReporter, now: SystemTime) -> Vec<(String, i32, i64, i64)> {
        reporter
            .snapshot_at(now)
            .devices
            .into_iter()
            .map(|d| {
                let id = d.device.unwrap_or_default();
                (
                    id.device_name,
                    d.health,
                    d.last_updated_time,
                    d.health_check_timeout_seconds,
                )
            })
            .collect()
    }

    #[test]
    fn a_resend_carries_the_time_of_the_last_report_and_a_silent_checker_reads_unknown() {
        let reporter = HealthReporter::with_timeout(Duration::from_secs(20));
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        reporter.set_at("p", "gpu-0", DeviceHealth::Healthy, String::new(), t0);
        let healthy = HealthStatus::Healthy as i32;
        // Sent again later: still the time it was reported.
        assert_eq!(
            sent(&reporter, t0 + Duration::from_secs(15)),
            [("gpu-0".into(), healthy, 1_000, 20)]
        );
        // Nobody checked for longer than the timeout.
        let unknown = HealthStatus::Unknown as i32;
        assert_eq!(
            sent(&reporter, t0 + Duration::from_secs(21)),
            [("gpu-0".into(), unknown, 1_000, 20)]
        );
        // Checked again: the same health, a new time.
        let t1 = t0 + Duration::from_secs(22);
        reporter.set_at("p", "gpu-0", DeviceHealth::Healthy, String::new(), t1);
        assert_eq!(
            sent(&reporter, t1 + Duration::from_secs(1)),
            [("gpu-0".into(), healthy, 1_022, 20)]
        );
    }

    #[test]
    fn only_a_change_or_a_removal_wakes_the_streams() {
        let reporter = HealthReporter::new();
        let mut changes = reporter.shared.table.subscribe();
        reporter.set("p", "gpu-0", DeviceHealth::Healthy, "");
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        reporter.set("p", "gpu-0", DeviceHealth::Healthy, "");
        assert!(
            !changes.has_changed().unwrap(),
            "a renewal waits for the resend"
        );
        reporter.set("p", "gpu-0", DeviceHealth::Unhealthy, "hot");
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        reporter.remove("p", "gpu-0");
        assert!(changes.has_changed().unwrap());
        assert!(reporter.snapshot().devices.is_empty());
        assert_eq!(reporter.timeout(), Duration::from_secs(30));
    }
}

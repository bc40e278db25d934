//! Device health from a driver's `DRAResourceHealth` stream.
//!
//! Each message is the driver's full device list. A device keeps its last
//! report; once that report is older than its timeout (the driver's
//! `health_check_timeout_seconds`, or the agent's default) it reads as
//! `Unknown`, which is also what becomes of a device the driver stops
//! listing. While the instance is disconnected all its reports read as
//! `Unknown`. Staleness is computed when status is read, so health costs no
//! timer.

use nodeplugins_api::retry::{Classify, Retry, Said};
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use nodeplugins_api::dra_health::v1;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::dra::drivers::connection::{Channel, Link};
use nodeplugins_api::dra_client::{HealthService, watch_health};

/// How long after a failed or ended stream it is opened again while the
/// connection stays up (upstream: 5 s).
pub(in crate::dra) const HEALTH_STREAM_RESTART: Duration = Duration::from_secs(5);
/// How long a device's report counts when the driver sets no timeout.
pub(in crate::dra) const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest message kept; longer ones are cut to 1021 characters and "...".
pub(in crate::dra) const MAX_MESSAGE_CHARS: usize = 1024;

/// The health of one device, as a driver reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceHealthStatus {
    /// The pool of the ResourceSlice that lists the device.
    pub pool: String,
    /// The device's name in its pool.
    pub device: String,
    /// `Healthy`, `Unhealthy` or `Unknown` (also when the report is older than its timeout).
    pub health: String,
    /// The driver's explanation (v1 only; at most 1024 characters).
    pub message: String,
    /// When the driver last checked (Unix seconds, as it said).
    pub last_updated_unix_s: i64,
    /// Whether the report is older than its timeout or came from an instance
    /// that is now disconnected, which makes it `Unknown`.
    pub stale: bool,
}

/// The last report of one device.
#[derive(Debug, Clone)]
pub(crate) struct ReportedHealth {
    health: i32,
    message: String,
    last_updated: i64,
    timeout: Option<Duration>,
    received: Instant,
}

/// Device health of one instance, keyed by (pool, device).
pub(crate) type HealthReports = BTreeMap<(String, String), ReportedHealth>;

/// Merges one full list into `reports`; devices not listed keep their old report.
pub(crate) fn apply(reports: &mut HealthReports, devices: Vec<v1::DeviceHealth>, now: Instant) {
    for device in devices {
        let Some(id) = device.device else { continue };
        let timeout = u64::try_from(device.health_check_timeout_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        reports.insert(
            (id.pool_name, id.device_name),
            ReportedHealth {
                health: device.health,
                message: truncate(device.message),
                last_updated: device.last_updated_time,
                timeout,
                received: now,
            },
        );
    }
}

fn truncate(message: String) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message;
    }
    let mut cut: String = message.chars().take(MAX_MESSAGE_CHARS - 3).collect();
    cut.push_str("...");
    cut
}

/// The reports as status shows them at `now`.
pub(crate) fn status(
    reports: &HealthReports,
    connected: bool,
    now: Instant,
    default_timeout: Duration,
) -> Vec<DeviceHealthStatus> {
    reports
        .iter()
        .map(|((pool, device), r)| {
            let stale = !connected
                || now.saturating_duration_since(r.received) > r.timeout.unwrap_or(default_timeout);
            let health = match v1::HealthStatus::try_from(r.health) {
                _ if stale => "Unknown",
                Ok(v1::HealthStatus::Healthy) => "Healthy",
                Ok(v1::HealthStatus::Unhealthy) => "Unhealthy",
                Ok(v1::HealthStatus::Unknown) | Err(_) => "Unknown",
            };
            DeviceHealthStatus {
                pool: pool.clone(),
                device: device.clone(),
                health: health.into(),
                message: r.message.clone(),
                last_updated_unix_s: r.last_updated,
                stale,
            }
        })
        .collect()
}

/// Keeps a health stream open on `channel` while its connection is up,
/// reporting each list as instance `id`'s, until `cancel`.
pub(crate) async fn follow(
    channel: Channel,
    service: HealthService,
    endpoint: String,
    id: u64,
    reports: mpsc::UnboundedSender<(u64, Vec<v1::DeviceHealth>)>,
    cancel: CancellationToken,
) {
    let mut link = channel.link();
    let update = |devices| {
        let _ = reports.send((id, devices));
    };
    let mut stops: Retry<StreamStop> = Retry::default();
    loop {
        let connects = tokio::select! {
            () = cancel.cancelled() => return,
            state = link.wait_for(Link::connected) => match state {
                Ok(state) => state.connects,
                Err(_) => return,
            },
        };
        let outcome = tokio::select! {
            () = cancel.cancelled() => return,
            outcome = stream_once(channel.clone(), service, &update) => outcome,
        };
        let stop = match outcome {
            Ok(()) => StreamStop::Ended,
            Err(status) => StreamStop::Failed(status),
        };
        let error = stop.to_string();
        if stops.record(stop) == Said::NewError {
            tracing::warn!(socket = %endpoint, %error, "DRA health stream stopped; reopening");
        }
        // Open it again after the restart period, or at once on a new connection.
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(HEALTH_STREAM_RESTART) => {}
            _ = link.wait_for(|s| s.connects > connects) => {}
        }
    }
}

/// Why a health stream stopped.
#[derive(Debug, thiserror::Error)]
enum StreamStop {
    #[error("the health stream ended")]
    Ended,
    #[error("{:?}: {}", .0.code(), .0.message())]
    Failed(Status),
}

/// A stopped stream is opened again after a fixed period; the same stop
/// again is said once, not at every restart.
impl Classify for StreamStop {
    fn same_as(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Ended, Self::Ended) => true,
            (Self::Failed(a), Self::Failed(b)) => {
                a.code() == b.code() && a.message() == b.message()
            }
            _ => false,
        }
    }
}

async fn stream_once(
    channel: Channel,
    service: HealthService,
    update: &(impl Fn(Vec<v1::DeviceHealth>) + Sync),
) -> Result<(), Status> {
    let mut stream = watch_health(channel, service).await?;
    while let Some(message) = stream.next().await {
        update(message?.devices);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(device: &str, health: v1::HealthStatus, timeout_s: i64) -> v1::DeviceHealth {
        v1::DeviceHealth {
            device: Some(v1::DeviceIdentifier {
                pool_name: "pool".into(),
                device_name: device.into(),
            }),
            health: health as i32,
            last_updated_time: 100,
            health_check_timeout_seconds: timeout_s,
            message: String::new(),
        }
    }

    #[test]
    fn reports_go_unknown_after_their_timeout_and_unlisted_devices_keep_their_last() {
        let start = Instant::now();
        let mut reports = HealthReports::new();
        apply(
            &mut reports,
            vec![
                report("a", v1::HealthStatus::Healthy, 0),
                report("b", v1::HealthStatus::Unhealthy, 5),
            ],
            start,
        );
        let default = Duration::from_secs(30);
        let health = |reports: &HealthReports, at: Duration| -> Vec<String> {
            status(reports, true, start + at, default)
                .into_iter()
                .map(|d| d.health)
                .collect()
        };
        assert_eq!(health(&reports, Duration::ZERO), ["Healthy", "Unhealthy"]);
        assert_eq!(
            health(&reports, Duration::from_secs(6)),
            ["Healthy", "Unknown"]
        );
        assert_eq!(
            health(&reports, Duration::from_secs(31)),
            ["Unknown", "Unknown"]
        );

        // A later list without "a" leaves a's old report to go stale.
        apply(
            &mut reports,
            vec![report("b", v1::HealthStatus::Healthy, 5)],
            start + Duration::from_secs(20),
        );
        assert_eq!(
            health(&reports, Duration::from_secs(24)),
            ["Healthy", "Healthy"]
        );
        assert_eq!(
            health(&reports, Duration::from_secs(31)),
            ["Unknown", "Unknown"]
        );

        // Reports from a disconnected instance cannot be trusted.
        let gone = status(&reports, false, start + Duration::from_secs(21), default);
        assert!(gone.iter().all(|d| d.stale && d.health == "Unknown"));
    }

    #[test]
    fn long_messages_are_cut_to_1024_characters() {
        let long = "é".repeat(2000);
        let cut = truncate(long);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS);
        assert!(cut.ends_with("..."));
        assert_eq!(truncate("short".into()), "short");
    }
}

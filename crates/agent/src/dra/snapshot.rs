//! What the DRA manager publishes after every change: an immutable
//! [`DraSnapshot`] of its drivers that readers (status, the admin socket)
//! read without asking the manager's task. What depends on the time it is
//! read (a cleanup's time left, whether health reports went stale) is worked
//! out then.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::status::{DraDriverStatus, DraInstanceStatus, PendingCleanup};
use crate::checkpoint::CheckpointProblem;
use crate::common::shards::{self, Published};
use crate::common::unix_time::unix_ms;
use crate::dra::drivers::cleanup::CleanupError;
use crate::dra::drivers::connection::LinkError;
use crate::dra::drivers::health::{self, HealthReports};
use crate::dra::drivers::state::State;
use nodeplugins_api::retry::Retry;

/// The DRA manager's drivers after a change.
#[derive(Debug, Default)]
pub struct DraSnapshot {
    /// Published by the running manager (the first snapshot, before it
    /// runs, is empty).
    running: bool,
    /// Each driver's row is made again only when it changed.
    drivers: Published<DriverSnapshot>,
    checkpoint_problem: Option<CheckpointProblem>,
    health_timeout: Duration,
}

/// One driver; the parts that depend on when it is read are kept raw, and
/// errors are made text only when shown.
#[derive(Debug)]
pub(crate) struct DriverSnapshot {
    /// Without `pending_cleanup`, `devices` and the instances' errors.
    status: DraDriverStatus,
    /// Each instance's last error, in the order of `status.instances`.
    instance_errors: Vec<Option<LinkError>>,
    /// The pending cleanup's schedule, failures and last error.
    cleanup: Option<Retry<Arc<CleanupError>>>,
    /// The health the instance in use reported, and whether it is connected.
    health: Option<(Arc<HealthReports>, bool)>,
}

impl crate::published::Ready for DraSnapshot {
    fn ready(&self) -> bool {
        self.running
    }
}

impl DraSnapshot {
    /// A running manager's drivers.
    pub(crate) fn new(
        drivers: Published<DriverSnapshot>,
        health_timeout: Duration,
        checkpoint_problem: Option<CheckpointProblem>,
    ) -> Self {
        Self {
            running: true,
            drivers,
            checkpoint_problem,
            health_timeout,
        }
    }

    /// Whether the manager was running when this was published.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The drivers as of `now`, sorted by name.
    pub fn status_at(&self, now: Instant) -> Vec<DraDriverStatus> {
        let wall = SystemTime::now();
        let mut drivers: Vec<DraDriverStatus> = shards::rows(&self.drivers)
            .map(|d| DraDriverStatus {
                instances: d
                    .status
                    .instances
                    .iter()
                    .zip(&d.instance_errors)
                    .map(|(instance, error)| DraInstanceStatus {
                        last_error: error.as_ref().map(ToString::to_string),
                        ..instance.clone()
                    })
                    .collect(),
                pending_cleanup: d.cleanup.as_ref().map(|c| {
                    let left = c.retry_in(now).unwrap_or_default();
                    PendingCleanup {
                        deadline_unix_ms: unix_ms(wall + left),
                        in_ms: left.as_millis() as u64,
                        failures: c.failures(),
                        last_error: c.last_error().map(ToString::to_string),
                    }
                }),
                devices: d
                    .health
                    .as_ref()
                    .map(|(reports, connected)| {
                        health::status(reports, *connected, now, self.health_timeout)
                    })
                    .unwrap_or_default(),
                ..d.status.clone()
            })
            .collect();
        drivers.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        drivers
    }

    /// What is wrong with the prepared claims' checkpoint, if anything.
    pub fn checkpoint_problem(&self) -> Option<&CheckpointProblem> {
        self.checkpoint_problem.as_ref()
    }
}

impl State {
    /// The row of driver `name`, if the manager knows it.
    pub(crate) fn driver_snapshot(&self, name: &str) -> Option<DriverSnapshot> {
        let d = self.drivers.get(name)?;
        let in_use = d.in_use();
        let in_use_id = in_use.map(|i| i.id);
        Some(DriverSnapshot {
            status: DraDriverStatus {
                name: name.to_string(),
                instances: d
                    .instances
                    .iter()
                    .map(|i| {
                        let link = i.link.borrow();
                        DraInstanceStatus {
                            endpoint: i.endpoint.clone(),
                            service: i.service,
                            health_service: i.health_service,
                            connected: link.connected(),
                            in_use: Some(i.id) == in_use_id,
                            registered_at_unix_ms: unix_ms(i.registered_at),
                            connection_changed_at_unix_ms: unix_ms(link.since),
                            last_error: None,
                            connects: link.connects,
                        }
                    })
                    .collect(),
                pending_cleanup: None,
                cleaned_up_at_unix_ms: d.cleaned_up_at.map(unix_ms),
                devices: Vec::new(),
            },
            instance_errors: d
                .instances
                .iter()
                .map(|i| i.link.borrow().last_error.clone())
                .collect(),
            cleanup: d.cleanup.as_ref().map(|c| c.retry.clone()),
            health: in_use.map(|i| (i.health.clone(), i.connected())),
        })
    }
}

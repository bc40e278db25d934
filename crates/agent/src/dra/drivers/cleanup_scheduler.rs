//! The DRA manager's cleanup scheduler: a driver without a connected
//! instance gets a cleanup due after the grace period; due cleanups call the
//! hook, each in a task of the scheduler's own; a failure is retried on the
//! shared backoff; a driver usable again in time cancels its cleanup (and a
//! call in progress is aborted).
//!
//! The scheduler keeps the calls and the order they fall due in; each
//! driver's record of its cleanup ([`ScheduledCleanup`], and when it was
//! last cleaned up) stays with the driver, where the status reads it. The
//! manager's task calls it and sends the events its outcomes report.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeplugins_api::retry::Retry;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::common::unix_time::unix_ms;
use crate::dra::drivers::cleanup::{
    CLEANUP_RETRY, CleanupDone, CleanupError, CleanupId, DriverCleanup, ScheduledCleanup,
};
use crate::dra::drivers::state::Driver;
use crate::event::EventKind;

/// Every driver, by name, as the manager's state holds them.
pub(crate) type Drivers = BTreeMap<String, Driver>;

/// Runs the cleanup hook when drivers stay unusable.
pub(crate) struct CleanupScheduler {
    hook: Arc<dyn DriverCleanup>,
    grace: Duration,
    /// Hook calls in progress.
    running: JoinSet<CleanupDone>,
    next_id: CleanupId,
    /// When scheduled cleanups fall due, earliest first. Entries are not
    /// removed when a cleanup is cancelled, started or rescheduled: one that
    /// no longer matches its driver's cleanup is dropped when reached.
    due: BTreeSet<(Instant, CleanupId, String)>,
}

/// What a change of a driver's instances did to its cleanup.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rescheduled {
    /// An instance is usable again: the pending cleanup is off.
    Cancelled,
    /// No instance is usable: the hook is called after the grace period.
    Scheduled {
        grace: Duration,
        deadline: SystemTime,
    },
}

/// How a hook call ended.
#[derive(Debug)]
pub(crate) enum Finished {
    /// The driver is cleaned up.
    CleanedUp,
    /// The call failed; it is tried again after `retry_in`.
    Failed {
        error: Arc<CleanupError>,
        retry_in: Duration,
    },
}

impl Rescheduled {
    /// Logs the change of `driver`'s cleanup; the event kind and detail
    /// that tell operators of it.
    pub(crate) fn report(&self, driver: &str) -> (EventKind, Option<String>) {
        match self {
            Self::Cancelled => {
                tracing::info!(%driver, "DRA driver usable again: cleanup cancelled");
                (EventKind::CleanupCancelled, None)
            }
            Self::Scheduled { grace, deadline } => {
                tracing::info!(%driver, grace = ?grace, "no instance of the DRA driver is connected: cleanup scheduled");
                let detail = format!("deadline {} (unix ms)", unix_ms(*deadline));
                (EventKind::CleanupScheduled, Some(detail))
            }
        }
    }
}

impl Finished {
    /// Logs how `driver`'s cleanup ended; the event kind and detail that
    /// tell operators of it.
    pub(crate) fn report(&self, driver: &str) -> (EventKind, Option<String>) {
        match self {
            Self::CleanedUp => {
                tracing::info!(%driver, "DRA driver cleaned up");
                (EventKind::CleanedUp, None)
            }
            Self::Failed { error, retry_in } => {
                tracing::warn!(%driver, %error, retry_in = ?retry_in, "DRA driver cleanup failed");
                (EventKind::CleanupFailed, Some(error.to_string()))
            }
        }
    }
}

impl CleanupScheduler {
    /// A scheduler calling `hook` `grace` after a driver became unusable.
    pub(crate) fn new(hook: Arc<dyn DriverCleanup>, grace: Duration) -> Self {
        Self {
            hook,
            grace,
            running: JoinSet::new(),
            next_id: 0,
            due: BTreeSet::new(),
        }
    }

    /// After `driver`'s instances changed: cancels its cleanup if it is
    /// `usable` (an instance is connected), or schedules one if it is not
    /// and none is pending (a pending one keeps its deadline) and it was not
    /// cleaned up since it was last usable.
    pub(crate) fn reschedule(
        &mut self,
        drivers: &mut Drivers,
        driver: &str,
        usable: bool,
        now: Instant,
    ) -> Option<Rescheduled> {
        let entry = drivers.get_mut(driver)?;
        let change = if usable {
            entry.cleaned_up_at = None;
            entry.cleanup.take().map(|_| Rescheduled::Cancelled)
        } else if entry.cleanup.is_none() && entry.cleaned_up_at.is_none() {
            self.next_id += 1;
            let due = now + self.grace;
            self.due.insert((due, self.next_id, driver.to_string()));
            let mut retry = Retry::default();
            retry.schedule(now, Some(self.grace));
            entry.cleanup = Some(ScheduledCleanup {
                id: self.next_id,
                retry,
                running: None,
            });
            Some(Rescheduled::Scheduled {
                grace: self.grace,
                deadline: SystemTime::now() + self.grace,
            })
        } else {
            None
        };
        if entry.is_empty() {
            drivers.remove(driver);
        }
        change
    }

    /// When the first cleanup not yet running falls due.
    pub(crate) fn next_due(&mut self, drivers: &Drivers) -> Option<Instant> {
        while let Some((due, id, driver)) = self.due.first() {
            if waiting(drivers, driver, *id, *due) {
                return Some(*due);
            }
            self.due.pop_first();
        }
        None
    }

    /// Calls the hook for every cleanup due at `now`; says whether any
    /// started.
    pub(crate) fn start_due(&mut self, drivers: &mut Drivers, now: Instant) -> bool {
        let mut started = false;
        while let Some((due, id, driver)) = self.due.first().cloned() {
            if due > now {
                break;
            }
            self.due.pop_first();
            if !waiting(drivers, &driver, id, due) {
                continue;
            }
            let Some(cleanup) = drivers.get_mut(&driver).and_then(|d| d.cleanup.as_mut()) else {
                continue;
            };
            let hook = self.hook.clone();
            let call = async move {
                let result = hook.driver_gone(&driver).await;
                (driver, id, result)
            };
            cleanup.running = Some(self.running.spawn(call));
            started = true;
        }
        started
    }

    /// The end of the next hook call to end; never, while none runs.
    /// Cancel-safe.
    pub(crate) async fn next_done(&mut self) -> CleanupDone {
        loop {
            match self.running.join_next().await {
                Some(Ok(done)) => return done,
                // Aborted: the cleanup was no longer wanted.
                Some(Err(_)) => {}
                None => std::future::pending().await,
            }
        }
    }

    /// Records how a hook call ended; `None` if that cleanup was cancelled
    /// (and maybe scheduled again) meanwhile.
    pub(crate) fn finish(
        &mut self,
        drivers: &mut Drivers,
        (driver, id, result): CleanupDone,
        now: Instant,
    ) -> Option<Finished> {
        let entry = drivers.get_mut(&driver)?;
        let cleanup = entry.cleanup.as_mut().filter(|c| c.id == id)?;
        cleanup.running = None;
        match result {
            Ok(()) => {
                entry.cleanup = None;
                entry.cleaned_up_at = Some(SystemTime::now());
                if entry.instances.is_empty() {
                    drivers.remove(&driver);
                }
                Some(Finished::CleanedUp)
            }
            Err(error) => {
                let error = Arc::new(error);
                cleanup.retry.failed(error.clone(), &CLEANUP_RETRY, now);
                let due = cleanup.retry.due()?;
                self.due.insert((due.at, id, driver));
                Some(Finished::Failed {
                    error,
                    retry_in: due.delay,
                })
            }
        }
    }

    /// Aborts every call in progress (the manager stops).
    pub(crate) fn stop(&mut self) {
        self.running.abort_all();
    }
}

/// Whether `driver`'s cleanup is still scheduling `id` at `due`.
fn waiting(drivers: &Drivers, driver: &str, id: CleanupId, due: Instant) -> bool {
    drivers
        .get(driver)
        .and_then(|d| d.cleanup.as_ref())
        .is_some_and(|c| c.id == id && c.retry.due_at() == Some(due) && c.running.is_none())
}

#[cfg(test)]
mod tests;

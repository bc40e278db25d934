//! The DRA manager's side of the cleanup scheduler
//! ([`super::super::cleanup_scheduler`]): asking it after each change of a
//! driver's instances, starting what falls due, and telling what it did.

use super::*;

impl Owner {
    /// Cancels the driver's cleanup if an instance is connected, or schedules
    /// one if none is and none is pending (a pending one keeps its deadline).
    pub(super) fn reschedule_cleanup(&mut self, driver: &str) {
        self.touched.insert(driver.to_string());
        let Some(usable) = self.state.drivers.get(driver).map(Driver::any_connected) else {
            return;
        };
        let change =
            self.scheduler
                .reschedule(&mut self.state.drivers, driver, usable, Instant::now());
        match change {
            Some(Rescheduled::Cancelled) => {
                tracing::info!(%driver, "DRA driver usable again: cleanup cancelled");
                self.event(EventKind::CleanupCancelled, driver, None, None);
            }
            Some(Rescheduled::Scheduled { grace, deadline }) => {
                tracing::info!(%driver, grace = ?grace, "no instance of the DRA driver is connected: cleanup scheduled");
                self.event(
                    EventKind::CleanupScheduled,
                    driver,
                    None,
                    Some(format!("deadline {} (unix ms)", unix_ms(deadline))),
                );
            }
            None => {}
        }
    }

    /// Calls the hook for every cleanup that is due.
    pub(super) fn start_due_cleanups(&mut self) -> bool {
        self.scheduler
            .start_due(&mut self.state.drivers, Instant::now())
    }

    pub(super) fn on_cleanup_done(&mut self, done: CleanupDone) -> bool {
        let driver = done.0.clone();
        self.touched.insert(driver.clone());
        let finished = self
            .scheduler
            .finish(&mut self.state.drivers, done, Instant::now());
        match finished {
            None => false,
            Some(Finished::CleanedUp) => {
                tracing::info!(%driver, "DRA driver cleaned up");
                self.event(EventKind::CleanedUp, &driver, None, None);
                true
            }
            Some(Finished::Failed { error, retry_in }) => {
                tracing::warn!(%driver, %error, retry_in = ?retry_in, "DRA driver cleanup failed");
                self.event(
                    EventKind::CleanupFailed,
                    &driver,
                    None,
                    Some(error.to_string()),
                );
                true
            }
        }
    }
}

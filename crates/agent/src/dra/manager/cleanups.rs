//! The cleanup scheduler of the DRA manager: a driver without a connected
//! instance gets a cleanup due after the grace period; due cleanups call the
//! hook in the owner's JoinSet; a failure is retried on the shared backoff,
//! and a driver back in time cancels its cleanup. The start-up cleanup
//! (withdraw everything) runs once before any driver registers.

use super::*;

impl Owner {
    /// Cancels the driver's cleanup if an instance is connected, or schedules
    /// one if none is and none is pending (a pending one keeps its deadline).
    pub(super) fn reschedule_cleanup(&mut self, driver: &str) {
        let grace = self.config.cleanup_grace;
        let Some(entry) = self.state.drivers.get_mut(driver) else {
            return;
        };
        let mut cancelled = false;
        let mut scheduled = None;
        if entry.any_connected() {
            entry.cleaned_up_at = None;
            cancelled = entry.cleanup.take().is_some();
        } else if entry.cleanup.is_none() && entry.cleaned_up_at.is_none() {
            self.next_cleanup += 1;
            let due = Instant::now() + grace;
            self.due
                .insert((due, self.next_cleanup, driver.to_string()));
            entry.cleanup = Some(ScheduledCleanup {
                id: self.next_cleanup,
                due,
                failures: 0,
                last_error: None,
                running: None,
            });
            scheduled = Some(SystemTime::now() + grace);
        }
        if entry.is_empty() {
            self.state.drivers.remove(driver);
        }
        if cancelled {
            tracing::info!(%driver, "DRA driver usable again: cleanup cancelled");
            self.event(DraEventKind::CleanupCancelled, driver, None, None);
        }
        if let Some(deadline) = scheduled {
            tracing::info!(%driver, grace = ?grace, "no instance of the DRA driver is connected: cleanup scheduled");
            self.event(
                DraEventKind::CleanupScheduled,
                driver,
                None,
                Some(format!("deadline {} (unix ms)", unix_ms(deadline))),
            );
        }
    }

    /// When the first cleanup not yet running falls due.
    pub(super) fn next_due(&mut self) -> Option<Instant> {
        while let Some((due, id, driver)) = self.due.first() {
            if self.is_waiting(driver, *id, *due) {
                return Some(*due);
            }
            self.due.pop_first();
        }
        None
    }

    /// Whether `driver`'s cleanup is still scheduling `id` at `due`.
    pub(super) fn is_waiting(&self, driver: &str, id: CleanupId, due: Instant) -> bool {
        self.state
            .drivers
            .get(driver)
            .and_then(|d| d.cleanup.as_ref())
            .is_some_and(|c| c.id == id && c.due == due && c.running.is_none())
    }

    /// Calls the hook for every cleanup that is due.
    pub(super) fn start_due_cleanups(&mut self) -> bool {
        let now = Instant::now();
        let mut started = false;
        while let Some((due, id, driver)) = self.due.first().cloned() {
            if due > now {
                break;
            }
            self.due.pop_first();
            if !self.is_waiting(&driver, id, due) {
                continue;
            }
            let Some(cleanup) = self
                .state
                .drivers
                .get_mut(&driver)
                .and_then(|d| d.cleanup.as_mut())
            else {
                continue;
            };
            let hook = self.hook.clone();
            let name = driver;
            let call = async move {
                let result =
                    match tokio::time::timeout(CLEANUP_CALL_TIMEOUT, hook.driver_gone(&name)).await
                    {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(CleanupError::timed_out()),
                    };
                (name, id, result)
            };
            cleanup.running = Some(self.cleanups.spawn(call));
            started = true;
        }
        started
    }

    pub(super) fn on_cleanup_done(&mut self, (driver, id, result): CleanupDone) -> bool {
        let Some(entry) = self.state.drivers.get_mut(&driver) else {
            return false;
        };
        let Some(cleanup) = entry.cleanup.as_mut().filter(|c| c.id == id) else {
            // Cancelled (and maybe scheduled again) meanwhile.
            return false;
        };
        cleanup.running = None;
        match result {
            Ok(()) => {
                entry.cleanup = None;
                entry.cleaned_up_at = Some(SystemTime::now());
                if entry.instances.is_empty() {
                    self.state.drivers.remove(&driver);
                }
                tracing::info!(%driver, "DRA driver cleaned up");
                self.event(DraEventKind::CleanedUp, &driver, None, None);
            }
            Err(error) => {
                let error = Arc::new(error);
                cleanup.failures = cleanup.failures.saturating_add(1);
                let delay =
                    Backoff::new(CLEANUP_RETRY_INITIAL, CLEANUP_RETRY_MAX).delay(cleanup.failures);
                cleanup.due = Instant::now() + delay;
                cleanup.last_error = Some(error.clone());
                self.due.insert((cleanup.due, id, driver.clone()));
                tracing::warn!(%driver, %error, retry_in = ?delay, "DRA driver cleanup failed");
                self.event(
                    DraEventKind::CleanupFailed,
                    &driver,
                    None,
                    Some(error.to_string()),
                );
            }
        }
        true
    }
}

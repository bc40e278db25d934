//! The one record every retried thing keeps: how many attempts failed in a
//! row, when the next one is due, and why the last one failed, with the
//! rule for telling operators (a new error once, not again while it
//! repeats; a recovery once). Each retry loop of the agent and the SDK holds
//! one [`Retry`] instead of its own `failures`, `retry_at` and `last_error`,
//! and asks one [`Classify`] of its errors what to do about them.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::backoff::Backoff;

/// What a failure calls for: the one classification every retry loop asks
/// of its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryClass {
    /// Try again on the backoff schedule (time-outs, an unavailable peer,
    /// server errors, throttling).
    Backoff,
    /// Refused for a reason a quick retry does not change: try again on the
    /// slow schedule.
    Slowly,
    /// Lost a race with another writer: once at once from a fresh read, then
    /// on the backoff schedule.
    Conflict,
    /// Waits for something to exist; a timer only if it was asked for again
    /// meanwhile.
    WhenItExists,
    /// The credentials were refused: they are read again, and the request
    /// retried on the backoff schedule.
    Credentials,
    /// Not retried by a timer: only a change of what was asked for (or of
    /// what it depends on) tries again.
    Permanent,
}

/// What a retry loop asks of its errors.
pub trait Classify {
    /// What this failure calls for.
    fn class(&self) -> RetryClass {
        RetryClass::Backoff
    }

    /// The least wait the other side asked for (a 429's Retry-After), if
    /// any.
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// Whether `self` is the same failure as `other`, so that it is not said
    /// again. By default, errors that read the same are the same.
    fn same_as(&self, other: &Self) -> bool
    where
        Self: std::fmt::Display,
    {
        self.to_string() == other.to_string()
    }
}

impl<E: Classify + std::fmt::Display + ?Sized> Classify for std::sync::Arc<E> {
    fn class(&self) -> RetryClass {
        E::class(self)
    }

    fn retry_after(&self) -> Option<Duration> {
        E::retry_after(self)
    }

    fn same_as(&self, other: &Self) -> bool {
        E::same_as(self, other)
    }
}

/// An error kept as its text: retried on the backoff schedule, the same
/// when it reads the same.
impl Classify for String {}

/// What the end of an attempt tells operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// Nothing new: it succeeded as before, or failed as the last time.
    Quiet,
    /// It failed in a new way (log it at warning level).
    NewError,
    /// It succeeded after failures (log the recovery once).
    Recovered,
}

/// When the next attempt is due, on both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// On the monotonic clock, for the timers.
    pub at: Instant,
    /// On the wall clock, for status.
    pub wall: SystemTime,
    /// The wait it was scheduled with.
    pub delay: Duration,
}

/// One retried thing's failures in a row, next attempt and last error.
#[derive(Debug, Clone)]
pub struct Retry<E> {
    failures: u32,
    due: Option<Due>,
    last_error: Option<E>,
}

impl<E> Default for Retry<E> {
    fn default() -> Self {
        Self {
            failures: 0,
            due: None,
            last_error: None,
        }
    }
}

impl<E> Retry<E> {
    /// Failed attempts in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether the last attempt failed.
    pub fn failing(&self) -> bool {
        self.failures > 0
    }

    /// Why the last attempt failed, while they keep failing.
    pub fn last_error(&self) -> Option<&E> {
        self.last_error.as_ref()
    }

    /// When the next attempt is due, if one is scheduled.
    pub fn due(&self) -> Option<Due> {
        self.due
    }

    /// When the next attempt is due on the monotonic clock.
    pub fn due_at(&self) -> Option<Instant> {
        self.due.map(|d| d.at)
    }

    /// Whether an attempt is held back at `now` (a retry is scheduled later).
    pub fn waiting(&self, now: Instant) -> bool {
        self.due.is_some_and(|d| d.at > now)
    }

    /// The time left at `now` before the next attempt, if one is scheduled.
    pub fn retry_in(&self, now: Instant) -> Option<Duration> {
        self.due.map(|d| d.at.saturating_duration_since(now))
    }

    /// An attempt succeeded: the record starts afresh.
    pub fn succeeded(&mut self) -> Said {
        let recovered = self.failing();
        *self = Self::default();
        if recovered {
            Said::Recovered
        } else {
            Said::Quiet
        }
    }

    /// The next attempt may run at once (what it waited for happened); the
    /// failures stay counted.
    pub fn wake(&mut self) {
        self.due = None;
    }

    /// Starts the schedule afresh (what the attempts waited for changed),
    /// keeping the last error so that the same failure again is not said
    /// again.
    pub fn restart(&mut self) {
        self.failures = 0;
        self.due = None;
    }

    /// Counts a failure whose error is kept elsewhere (or is none), without
    /// scheduling; returns the failures in a row.
    pub fn count_failure(&mut self) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.failures
    }

    /// Schedules the next attempt `delay` after `now` (or clears it with
    /// `None`), as the caller's own rule decides.
    pub fn schedule(&mut self, now: Instant, delay: Option<Duration>) {
        self.due = delay.map(|delay| Due {
            at: now + delay,
            wall: SystemTime::now() + delay,
            delay,
        });
    }

    /// Schedules the next attempt `delay` after `now`, given on both clocks
    /// (for a caller that read them once for many records).
    pub fn schedule_at(&mut self, now: (Instant, SystemTime), delay: Duration) {
        self.due = Some(Due {
            at: now.0 + delay,
            wall: now.1 + delay,
            delay,
        });
    }
}

impl<E: Classify + std::fmt::Display> Retry<E> {
    /// An attempt failed with `error`: counts it and keeps the error, without
    /// scheduling (for loops whose schedule is their own, see
    /// [`schedule`](Self::schedule)). Says whether the error is new.
    pub fn record(&mut self, error: E) -> Said {
        self.count_failure();
        let repeated = self
            .last_error
            .as_ref()
            .is_some_and(|last| last.same_as(&error));
        self.last_error = Some(error);
        if repeated {
            Said::Quiet
        } else {
            Said::NewError
        }
    }

    /// An attempt failed with `error` at `now`: counts it, keeps the error
    /// and schedules the next attempt on `backoff` (no sooner than the error
    /// asked). Says whether the error is new.
    pub fn failed(&mut self, error: E, backoff: &Backoff, now: Instant) -> Said {
        let asked = error.retry_after().unwrap_or_default();
        let said = self.record(error);
        let delay = backoff.delay(self.failures).max(asked);
        self.schedule(now, Some(delay));
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct Error(&'static str, Option<Duration>);

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Classify for Error {
        fn retry_after(&self) -> Option<Duration> {
            self.1
        }
    }

    const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));

    #[test]
    fn an_error_is_said_once_while_it_repeats_and_recovery_once() {
        let now = Instant::now();
        let mut retry = Retry::default();
        assert_eq!(retry.succeeded(), Said::Quiet);
        assert_eq!(
            retry.failed(Error("down", None), &BACKOFF, now),
            Said::NewError
        );
        assert_eq!(
            retry.failed(Error("down", None), &BACKOFF, now),
            Said::Quiet
        );
        assert_eq!(
            retry.failed(Error("other", None), &BACKOFF, now),
            Said::NewError
        );
        assert_eq!(retry.failures(), 3);
        assert_eq!(retry.last_error().map(|e| e.0), Some("other"));
        assert_eq!(retry.succeeded(), Said::Recovered);
        assert!(!retry.failing());
        assert!(retry.due().is_none());
        assert_eq!(retry.succeeded(), Said::Quiet);
    }

    #[test]
    fn each_failure_waits_longer_and_never_less_than_asked() {
        let now = Instant::now();
        let mut retry = Retry::default();
        retry.failed(Error("x", None), &BACKOFF, now);
        assert_eq!(retry.retry_in(now), Some(Duration::from_millis(100)));
        retry.failed(Error("x", None), &BACKOFF, now);
        assert_eq!(retry.retry_in(now), Some(Duration::from_millis(200)));
        assert!(retry.waiting(now));
        assert!(!retry.waiting(now + Duration::from_millis(200)));
        retry.failed(Error("x", Some(Duration::from_secs(5))), &BACKOFF, now);
        assert_eq!(retry.retry_in(now), Some(Duration::from_secs(5)));
        retry.wake();
        assert!(!retry.waiting(now));
        assert_eq!(retry.failures(), 3, "waking keeps the count");
    }
}

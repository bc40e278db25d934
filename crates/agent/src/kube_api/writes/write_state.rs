//! One kind of latest-state-wins write (node status, CSI): whether it is
//! due, what the server was last given, and the retry schedule its last
//! failure calls for.

use std::sync::Arc;

use nodeplugins_api::backoff::Backoff;
use tokio::time::Instant;

use nodeplugins_api::retry::{Classify, Retry, RetryClass, Said};

use crate::kube_api::error::KubeApiError;
use crate::kube_api::writes::repair_limit::RepairLimit;

/// How a kind of write is retried: `backoff` for a server that is away or
/// slow, `slowly` for a refusal that repeating will not change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    pub(crate) backoff: Backoff,
    pub(crate) slowly: Backoff,
}

/// The state of one kind of write.
#[derive(Debug)]
pub(crate) struct WriteState<T> {
    /// The state changed since it was last written.
    pub(crate) dirty: bool,
    /// When the next write may start; `None` while it waits for the Node
    /// to exist, or for nothing.
    pub(crate) due: Option<Instant>,
    /// What was last written with success, while nothing says the server
    /// has something else.
    pub(crate) written: Option<T>,
    pub(crate) in_flight: bool,
    /// Failed writes in a row, and why the last one failed.
    pub(crate) failures: Retry<Arc<KubeApiError>>,
    /// After a refusal: the earliest a changed state is written. A refusal
    /// of one state says little of the next (a colliding CSI driver gone,
    /// another one back), so a change goes out at the usual backoff's pace
    /// while the refused state itself is retried minutes apart.
    pub(crate) changed_due: Option<Instant>,
    /// The object written to was seen not to exist: changes wait for it.
    pub(crate) awaiting_object: bool,
    /// How soon drift is repaired.
    repairs: RepairLimit,
}

impl<T: PartialEq> WriteState<T> {
    /// Due now: nothing is known of what the server has.
    pub(crate) fn dirty_now() -> Self {
        Self {
            dirty: true,
            due: Some(Instant::now()),
            written: None,
            in_flight: false,
            failures: Retry::default(),
            changed_due: None,
            awaiting_object: false,
            repairs: RepairLimit::new(Instant::now()),
        }
    }

    /// The state changed: the write is due `settle` from now, unless it is
    /// due sooner or waits out a failure's backoff (after a refusal, the
    /// usual backoff's, see [`WriteState::changed_due`]).
    pub(crate) fn mark(&mut self, now: Instant, settle: std::time::Duration) {
        self.dirty = true;
        if self.awaiting_object {
            return;
        }
        let soon = now + settle;
        self.due = Some(match self.due {
            Some(due) if self.failures.failing() => match self.changed_due {
                Some(changed) => due.min(changed.max(soon)),
                None => due,
            },
            Some(due) => due.min(soon),
            None => soon,
        });
    }

    /// The server was seen to differ from what was written (another
    /// writer, a lost write): the state is written again even if unchanged,
    /// at once while the object's recent repairs are few, else when the
    /// [`RepairLimit`] allows. A write already due for a change of the
    /// state goes as it would.
    pub(crate) fn drifted(&mut self, now: Instant) {
        self.written = None;
        let wait = match self.dirty {
            true => std::time::Duration::ZERO,
            false => self.repairs.take(now),
        };
        self.mark(now, wait);
    }

    /// The object written to does not exist: what the server had is gone,
    /// and the write waits until [`WriteState::object_exists`].
    pub(crate) fn wait_for_object(&mut self) {
        self.written = None;
        self.dirty = true;
        self.due = None;
        self.awaiting_object = true;
    }

    /// The object written to exists (again): a write waiting for it is due
    /// now.
    pub(crate) fn object_exists(&mut self, now: Instant) {
        if std::mem::take(&mut self.awaiting_object) {
            self.mark(now, std::time::Duration::ZERO);
        }
    }

    /// Whether a write should start now.
    pub(crate) fn ready(&self, now: Instant) -> bool {
        self.dirty && !self.in_flight && self.due.is_some_and(|due| due <= now)
    }

    /// When it is next due, if it waits for a time.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        if self.dirty && !self.in_flight {
            self.due
        } else {
            None
        }
    }

    /// Whether something is not yet written.
    pub(crate) fn pending(&self) -> bool {
        self.dirty || self.in_flight || self.failures.failing()
    }

    /// A write starts.
    pub(crate) fn start(&mut self) {
        self.dirty = false;
        self.in_flight = true;
    }

    /// A write was not needed: the server has the state.
    pub(crate) fn unchanged(&mut self) {
        self.in_flight = false;
        if !self.dirty {
            self.due = None;
        }
    }

    /// A write of `desired` ended: on success it is what the server has; on
    /// failure the state stays dirty and is retried as the error calls for.
    pub(crate) fn finished(
        &mut self,
        desired: T,
        result: Result<(), KubeApiError>,
        now: Instant,
        policy: &RetryPolicy,
    ) -> Said {
        self.in_flight = false;
        match result {
            Ok(()) => {
                self.written = Some(desired);
                if !self.dirty {
                    self.due = None;
                }
                self.changed_due = None;
                self.failures.succeeded()
            }
            Err(e) => {
                // Marked while the write was out: something changed, maybe
                // the very object it did not find.
                let marked_meanwhile = self.dirty;
                let error = Arc::new(e);
                let said = self.failures.record(error.clone());
                let failures = self.failures.failures();
                self.dirty = true;
                self.written = None;
                let class = error.class();
                self.changed_due =
                    (class == RetryClass::Slowly).then(|| now + policy.backoff.delay(failures));
                self.due = match class {
                    // The first conflict goes again at once, from a fresh
                    // read; a storm of them backs off like any failure.
                    RetryClass::Conflict if failures <= 1 => Some(now),
                    RetryClass::Conflict => Some(now + policy.backoff.delay(failures - 1)),
                    RetryClass::WhenItExists if marked_meanwhile => {
                        Some(now + policy.backoff.delay(failures))
                    }
                    RetryClass::WhenItExists => None,
                    RetryClass::Slowly | RetryClass::Permanent => {
                        Some(now + policy.slowly.delay(failures))
                    }
                    // No sooner than the server asked (a 429's Retry-After).
                    _ => {
                        let asked = error.retry_after().unwrap_or_default();
                        Some(now + policy.backoff.delay(failures).max(asked))
                    }
                };
                match self.due {
                    Some(due) => {
                        let retry_in_ms = due.saturating_duration_since(now).as_millis() as u64;
                        tracing::debug!(failures, retry_in_ms, %error, "Kubernetes API write failed");
                    }
                    None => {
                        tracing::debug!(failures, %error, "Kubernetes API write failed; waiting for the Node");
                    }
                }
                said
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
        slowly: Backoff::new(Duration::from_secs(10), Duration::from_secs(300)),
    };

    fn answered(code: u16) -> KubeApiError {
        KubeApiError::Request {
            what: "apply node n status".into(),
            source: kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            })),
        }
    }

    #[test]
    fn a_burst_of_changes_is_one_write_after_the_settle() {
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        state.start();
        state.finished(1, Ok(()), now, &POLICY);
        assert_eq!(state.next_due(), None, "nothing to do");
        state.mark(now, Duration::from_millis(10));
        state.mark(now + Duration::from_millis(5), Duration::from_millis(10));
        assert_eq!(state.next_due(), Some(now + Duration::from_millis(10)));
        assert!(!state.ready(now + Duration::from_millis(9)));
        assert!(state.ready(now + Duration::from_millis(10)));
    }

    #[test]
    fn a_refusal_is_retried_minutes_apart_and_said_once() {
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        state.start();
        let first = state.finished(1, Err(answered(403)), now, &POLICY);
        assert!(first == Said::NewError);
        assert_eq!(state.next_due(), Some(now + Duration::from_secs(10)));
        // The same state again does not hurry it.
        state.dirty = true;
        assert_eq!(state.next_due(), Some(now + Duration::from_secs(10)));
        state.start();
        let again = state.finished(1, Err(answered(403)), now, &POLICY);
        assert!(again == Said::Quiet, "the same error is said once");
        assert_eq!(state.next_due(), Some(now + Duration::from_secs(20)));
        for _ in 0..10 {
            state.start();
            state.finished(1, Err(answered(403)), now, &POLICY);
        }
        assert_eq!(state.next_due(), Some(now + Duration::from_secs(300)));
        // A changed state goes out at the usual backoff's pace: 2 s at most.
        state.mark(now, Duration::from_millis(10));
        assert_eq!(state.next_due(), Some(now + Duration::from_secs(2)));
        let later = now + Duration::from_secs(5);
        state.start();
        state.finished(2, Err(answered(403)), later, &POLICY);
        state.mark(later, Duration::from_millis(10));
        assert_eq!(state.next_due(), Some(later + Duration::from_secs(2)));
    }

    #[test]
    fn a_node_made_while_a_write_missed_it_is_written_soon() {
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        state.start();
        // The Node made while a write that did not find it was out: that
        // write's failure does not leave the state waiting.
        state.mark(now, Duration::ZERO);
        state.finished(1, Err(KubeApiError::NoNode("n".into())), now, &POLICY);
        assert!(
            state
                .next_due()
                .is_some_and(|due| due <= now + Duration::from_secs(3))
        );
    }

    #[test]
    fn a_node_seen_deleted_is_written_once_it_exists_again_and_not_before() {
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        state.start();
        state.finished(1, Ok(()), now, &POLICY);
        state.wait_for_object();
        assert_eq!(state.written, None);
        state.mark(now, Duration::from_millis(10));
        assert_eq!(state.next_due(), None, "changes wait for the Node");
        state.object_exists(now);
        assert_eq!(state.next_due(), Some(now));
    }

    #[test]
    fn a_missing_node_waits_for_the_node_and_a_conflict_goes_again_at_once() {
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        state.start();
        state.finished(1, Err(KubeApiError::NoNode("n".into())), now, &POLICY);
        assert_eq!(state.next_due(), None, "waits for the Node");
        state.mark(now, Duration::ZERO);
        assert_eq!(state.next_due(), Some(now), "the Node is there");
        state.start();
        let outcome = state.finished(1, Ok(()), now, &POLICY);
        assert!(outcome == Said::Recovered);
        state.mark(now, Duration::ZERO);
        state.start();
        state.finished(2, Err(answered(409)), now, &POLICY);
        assert_eq!(state.next_due(), Some(now), "a first conflict: at once");
        state.start();
        let outcome = state.finished(2, Ok(()), now, &POLICY);
        assert!(outcome == Said::Recovered);
        assert_eq!(state.written, Some(2));
    }

    #[test]
    fn a_429_is_retried_no_sooner_than_the_server_asked() {
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        state.start();
        let status = kube::core::Status {
            code: 429,
            details: Some(kube::core::response::StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: 7,
            }),
            ..Default::default()
        };
        let error = KubeApiError::Request {
            what: "patch node n status".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        state.finished(1, Err(error), now, &POLICY);
        assert_eq!(state.next_due(), Some(now + Duration::from_secs(7)));
        // Without one, the usual backoff.
        state.start();
        state.finished(1, Err(answered(429)), now, &POLICY);
        assert_eq!(state.next_due(), Some(now + POLICY.backoff.delay(2)));
    }

    #[test]
    fn a_storm_of_conflicts_is_retried_with_growing_jittered_delays() {
        let policy = RetryPolicy {
            backoff: POLICY.backoff.with_jitter(0.2),
            slowly: POLICY.slowly,
        };
        let now = Instant::now();
        let mut state = WriteState::<u32>::dirty_now();
        let mut delays = Vec::new();
        for _ in 0..5 {
            state.start();
            state.finished(1, Err(answered(409)), now, &policy);
            let due = state.next_due().unwrap();
            delays.push(due.saturating_duration_since(now));
        }
        assert_eq!(delays[0], Duration::ZERO, "the first at once");
        for (i, delay) in delays.iter().enumerate().skip(1) {
            let base = POLICY.backoff.base_delay(i as u32);
            assert!(
                *delay >= base && *delay <= base.mul_f64(1.2),
                "conflict {}: {delay:?} not within [{base:?}, +20%]",
                i + 1
            );
        }
        assert!(delays[4] > delays[1], "{delays:?}");
    }
}

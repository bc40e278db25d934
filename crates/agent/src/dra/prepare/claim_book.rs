//! The claims prepared on the node, shared by every caller: their records
//! ([`PreparedClaims`], every decision about them), the claims being
//! unprepared, and the checkpoint that holds them. A prepare or an
//! unprepare changes them under one lock in the caller's task, as the
//! kubelet's DRA manager changes its claim cache under its lock, so that
//! neither waits on the manager's task; the lock is never held across a
//! driver call or a write. Each change is published for readers at once
//! and written in the background; a caller that must not go on before its
//! change is on disk waits for the write that holds it.
//!
//! The manager's task loads the book from the checkpoint when it starts,
//! handing it the sender readers follow, and hears the ends of its writes;
//! callers wait for the loaded records before they change anything, and a
//! manager dropped before it ran drops the sender, which tells them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::sync::oneshot;

use crate::published::Publisher;

use crate::checkpoint::{CheckpointProblem, Ends, Persister, WriteDone, Written, write_out};
use crate::common::unix_time::unix_ms;
use crate::dra::claim::PreparedClaim;
use crate::dra::error::DraError;
use crate::dra::prepare::checkpoint::DraCheckpoint;
use crate::dra::prepare::records::{ClaimToPrepare, PreparePlan, PreparedClaims, UnpreparePlan};

/// The prepared claims, their publishing and their checkpoint.
#[derive(Default)]
pub(crate) struct ClaimBook {
    /// What changes together, under the lock every change takes.
    state: Mutex<BookState>,
}

/// What the lock holds.
#[derive(Default)]
struct BookState {
    /// The records, published for readers (none until loaded). The
    /// published copy is the only one: it is changed in place unless a
    /// reader still holds it, so a change costs a copy of the whole set only
    /// then.
    published: Option<Publisher<PreparedClaims>>,
    /// Claims whose last pod is being unprepared (the kubelet's
    /// `isUnpreparing`): no pod may start using them meanwhile.
    unpreparing: HashSet<String>,
    /// Writes the records, with a state directory.
    persister: Option<Persister<DraCheckpoint>>,
}

impl ClaimBook {
    /// The book loaded: `loaded` (the checkpoint's records), published
    /// through `published` from now on and written by `persister` (none
    /// without a state directory), whose ends go to [`Self::on_written`].
    pub(crate) fn load(
        &self,
        loaded: PreparedClaims,
        persister: Option<Persister<DraCheckpoint>>,
        published: Publisher<PreparedClaims>,
    ) {
        let mut state = self.lock();
        state.persister = persister;
        published.publish(loaded.loaded());
        state.published = Some(published);
    }

    /// Prepare, first step: the records decide. The calls to make, and the
    /// end of the write holding the records when they changed.
    pub(crate) fn begin_prepare(
        &self,
        claims: &[ClaimToPrepare],
    ) -> Result<(PreparePlan, Option<WriteDone>), DraError> {
        let now = unix_ms(SystemTime::now());
        let mut state = self.lock();
        let state = &mut *state;
        let Some(published) = &state.published else {
            return Err(DraError::Stopping);
        };
        let mut plan = Ok((PreparePlan::default(), false));
        let unpreparing = &state.unpreparing;
        let changed = published.modify(|records| {
            plan = Arc::make_mut(records).begin_prepare(claims, unpreparing, now);
            let changed = matches!(plan, Ok((_, true)));
            if changed {
                Arc::make_mut(records).changed();
            }
            changed
        });
        let (plan, _) = plan?;
        Ok((plan, state.when_written(changed)))
    }

    /// Prepare, last step: what each driver prepared is recorded. The end
    /// of the write holding that, when anything changed.
    pub(crate) fn finish_prepare(
        &self,
        results: &[(String, Vec<PreparedClaim>)],
    ) -> Option<WriteDone> {
        let now = unix_ms(SystemTime::now());
        let mut state = self.lock();
        let changed = state.change(|records| {
            results.iter().fold(false, |changed, (driver, results)| {
                records.finish_prepare(driver, results, now) | changed
            })
        });
        state.when_written(changed)
    }

    /// After a reboot: the claims of pod `pod_uid` (every claim, with
    /// `None`) are to be prepared again. The end of the write holding
    /// that, when anything changed.
    pub(crate) fn prepare_again(&self, pod_uid: Option<&str>) -> Option<WriteDone> {
        let mut state = self.lock();
        let changed = state.change(|records| records.prepare_again(pod_uid));
        state.when_written(changed)
    }

    /// Unprepare, first step: the pod is forgotten where other pods still
    /// use a claim, and the claims it used last are marked as being
    /// unprepared. The calls to make, and the end of the write when
    /// anything changed.
    pub(crate) fn begin_unprepare(&self, pod_uid: &str) -> (UnpreparePlan, Option<WriteDone>) {
        let mut state = self.lock();
        let mut plan = UnpreparePlan::default();
        let changed = state.change(|records| {
            let (made, changed) = records.begin_unprepare(pod_uid);
            plan = made;
            changed
        });
        for claims in plan.calls.values() {
            state
                .unpreparing
                .extend(claims.iter().map(|c| c.uid.clone()));
        }
        let written = state.when_written(changed);
        (plan, written)
    }

    /// Unprepare, last step: what each driver unprepared (driver → claim
    /// UIDs) is forgotten, and the claims of `ended` that no driver holds
    /// any more are no longer being unprepared. The end of the write when
    /// anything changed.
    pub(crate) fn finish_unprepare(
        &self,
        unprepared: &[(String, Vec<String>)],
        ended: &[String],
    ) -> Option<WriteDone> {
        let mut state = self.lock();
        let changed = state.change(|records| {
            unprepared.iter().fold(false, |changed, (driver, uids)| {
                records.forget(driver, uids.iter().map(String::as_str)) | changed
            })
        });
        // A claim stays being unprepared while any driver still holds it
        // (its unprepare failed): no pod may start using the old prepare,
        // and unpreparing its pod again calls those drivers again.
        if let Some(records) = state.published.as_ref().map(Publisher::current) {
            for uid in ended {
                if records.drivers_of(uid).next().is_none() {
                    state.unpreparing.remove(uid);
                }
            }
        }
        state.when_written(changed)
    }

    /// A checkpoint write ended: its waiters are answered and the changes
    /// made meanwhile are handed to the writer. Says whether the
    /// checkpoint's problem changed.
    pub(crate) fn on_written(&self, written: Written) -> bool {
        let mut state = self.lock();
        let Some(persister) = &mut state.persister else {
            return false;
        };
        let failed_before = persister.last_error().is_some();
        let result = persister.on_written(written);
        state.flush();
        match result {
            Err((e, _)) => {
                tracing::error!(error = %e, "cannot write the DRA claims checkpoint");
                true
            }
            Ok(()) => failed_before,
        }
    }

    /// What is wrong with the checkpoint: the last write failed, or it
    /// could not be loaded or was repaired at start.
    pub(crate) fn problem(&self) -> Option<CheckpointProblem> {
        self.lock().persister.as_ref().and_then(Persister::problem)
    }

    /// Writes what is not written yet and waits for it (`ends`: its
    /// persister's), then stops writing: the manager's last act. Changes
    /// made after it are not written.
    pub(crate) async fn finish(&self, ends: &mut Ends) {
        let flush = || {
            let mut state = self.lock();
            state.flush();
            state.persister.as_ref().is_some_and(Persister::writing)
        };
        write_out(ends, flush, |written| {
            self.on_written(written);
        })
        .await;
        // Its writer ends with it.
        self.lock().persister = None;
    }

    /// The lock every change takes. Nothing that holds it can leave the
    /// state half changed (each change is one call into the records), so a
    /// panic elsewhere while holding it leaves nothing to repair.
    fn lock(&self) -> MutexGuard<'_, BookState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BookState {
    /// Changes the records with `change` (which says whether it changed
    /// anything) and publishes them; nothing before the book is loaded.
    fn change(&self, change: impl FnOnce(&mut PreparedClaims) -> bool) -> bool {
        let Some(published) = &self.published else {
            return false;
        };
        published.modify(|records| {
            let records = Arc::make_mut(records);
            let changed = change(records);
            if changed {
                records.changed();
            }
            changed
        })
    }

    /// The end of the write that holds the current records, when `changed`
    /// (none without a change or a state directory); the write starts now
    /// unless one runs, which leaves it to the next.
    fn when_written(&mut self, changed: bool) -> Option<WriteDone> {
        if !changed {
            return None;
        }
        let persister = self.persister.as_mut()?;
        let (reply, done) = oneshot::channel();
        let version = persister.changed();
        persister.when_written(version, reply, ());
        self.flush();
        Some(done)
    }

    /// Hands the records to the writer if they changed since the last
    /// write and none runs.
    fn flush(&mut self) {
        if let (Some(persister), Some(published)) = (&mut self.persister, &self.published) {
            let records = published.current();
            persister.flush(|| DraCheckpoint::of(&records));
        }
    }
}

#[cfg(test)]
mod tests;

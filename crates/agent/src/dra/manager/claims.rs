//! The DRA manager's claims: the records ([`PreparedClaims`], every
//! decision about them), published for readers after each change, and
//! kept on disk by the persister, whose writes answer the callers waiting
//! for a change to be on disk. The owner's task holds one and hands it the
//! prepare and unprepare commands.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{oneshot, watch};

use crate::checkpoint::{CheckpointProblem, Persister, Written, WrittenReply};
use crate::dra::checkpoint::DraCheckpoint;
use crate::dra::claim::PreparedClaim;
use crate::dra::command::{Routes, WriteDone};
use crate::dra::error::DraError;
use crate::dra::records::{ClaimToPrepare, PreparePlan, PreparedClaims, UnpreparePlan};
use crate::unix_time::unix_ms;

/// The claims prepared on the node, as the owner keeps them.
pub(super) struct Claims {
    /// The records, published for handles. The published copy is the only
    /// one: it is changed in place unless a reader still holds it, so a
    /// change costs a copy of the whole set only then.
    published: watch::Sender<Arc<PreparedClaims>>,
    /// Claims whose last pod is being unprepared (the kubelet's
    /// `isUnpreparing`): no pod may start using them meanwhile.
    unpreparing: HashSet<String>,
    /// Writes the records, with a state directory.
    persister: Option<Persister<DraCheckpoint>>,
}

impl Claims {
    /// `loaded` (the checkpoint's records), published as loaded, written
    /// by `persister`.
    pub(super) fn new(
        published: watch::Sender<Arc<PreparedClaims>>,
        loaded: PreparedClaims,
        persister: Option<Persister<DraCheckpoint>>,
    ) -> Self {
        published.send_replace(Arc::new(loaded.loaded()));
        Self {
            published,
            unpreparing: HashSet::new(),
            persister,
        }
    }

    /// Prepare, first step: the drivers must be registered (in `routes`),
    /// then the records decide. Answered with the calls to make and the end
    /// of the write holding the records. Says whether they changed.
    pub(super) fn begin_prepare(
        &mut self,
        claims: &[ClaimToPrepare],
        routes: &Routes,
        reply: oneshot::Sender<Result<(PreparePlan, Option<WriteDone>), DraError>>,
    ) -> bool {
        let unregistered = claims
            .iter()
            .flat_map(|c| &c.drivers)
            .find(|driver| !routes.contains_key(*driver));
        if let Some(driver) = unregistered {
            let _ = reply.send(Err(DraError::NotRegistered(driver.clone())));
            return false;
        }
        let now = unix_ms(SystemTime::now());
        let mut plan = Ok((PreparePlan::default(), false));
        let unpreparing = &self.unpreparing;
        let changed = self.published.send_if_modified(|records| {
            plan = Arc::make_mut(records).begin_prepare(claims, unpreparing, now);
            let changed = matches!(plan, Ok((_, true)));
            if changed {
                Arc::make_mut(records).changed();
            }
            changed
        });
        let _ = reply.send(plan.map(|(plan, _)| (plan, self.when_written(changed))));
        changed
    }

    /// Prepare, last step: what each driver prepared is recorded; answered
    /// once on disk. Says whether anything changed.
    pub(super) fn finish_prepare(
        &mut self,
        results: &[(String, Vec<PreparedClaim>)],
        reply: WrittenReply,
    ) -> bool {
        let now = unix_ms(SystemTime::now());
        let changed = self.change(|records| {
            results.iter().fold(false, |changed, (driver, results)| {
                records.finish_prepare(driver, results, now) | changed
            })
        });
        self.answer_when_written(changed, reply);
        changed
    }

    /// After a reboot: the claims of pod `pod_uid` (every claim, with
    /// `None`) are to be prepared again; answered once on disk. Says
    /// whether anything changed.
    pub(super) fn prepare_again(&mut self, pod_uid: Option<&str>, reply: WrittenReply) -> bool {
        let changed = self.change(|records| records.prepare_again(pod_uid));
        self.answer_when_written(changed, reply);
        changed
    }

    /// Unprepare, first step: the pod is forgotten where other pods still
    /// use a claim, and the claims it used last are marked as being
    /// unprepared. Answered with the calls to make and the end of the
    /// write. Says whether anything changed.
    pub(super) fn begin_unprepare(
        &mut self,
        pod_uid: &str,
        reply: oneshot::Sender<(UnpreparePlan, Option<WriteDone>)>,
    ) -> bool {
        let mut plan = UnpreparePlan::default();
        let changed = self.change(|records| {
            let (made, changed) = records.begin_unprepare(pod_uid);
            plan = made;
            changed
        });
        for claims in plan.calls.values() {
            self.unpreparing
                .extend(claims.iter().map(|c| c.uid.clone()));
        }
        let _ = reply.send((plan, self.when_written(changed)));
        changed
    }

    /// Unprepare, last step: what each driver unprepared (driver → claim
    /// UIDs) is forgotten, and the claims of `ended` that no driver holds
    /// any more are no longer being unprepared. Answered once on disk. Says
    /// whether anything changed.
    pub(super) fn finish_unprepare(
        &mut self,
        unprepared: &[(String, Vec<String>)],
        ended: &[String],
        reply: WrittenReply,
    ) -> bool {
        let changed = self.change(|records| {
            unprepared.iter().fold(false, |changed, (driver, uids)| {
                records.forget(driver, uids.iter().map(String::as_str)) | changed
            })
        });
        // A claim stays being unprepared while any driver still holds it
        // (its unprepare failed): no pod may start using the old prepare,
        // and unpreparing its pod again calls those drivers again.
        let records = self.published.borrow().clone();
        for uid in ended {
            if records.drivers_of(uid).next().is_none() {
                self.unpreparing.remove(uid);
            }
        }
        self.answer_when_written(changed, reply);
        changed
    }

    /// Changes the records with `change` (which says whether it changed
    /// anything) and publishes them.
    fn change(&mut self, change: impl FnOnce(&mut PreparedClaims) -> bool) -> bool {
        self.published.send_if_modified(|records| {
            let records = Arc::make_mut(records);
            let changed = change(records);
            if changed {
                records.changed();
            }
            changed
        })
    }

    /// Answers `reply` once the records are on disk (at once without a
    /// change or a state directory).
    fn answer_when_written(&mut self, changed: bool, reply: WrittenReply) {
        match (&mut self.persister, changed) {
            (Some(persister), true) => {
                let version = persister.changed();
                persister.when_written(version, reply, ());
            }
            _ => {
                let _ = reply.send(Ok(()));
            }
        }
    }

    /// The end of the write that holds the current records, when `changed`
    /// (none without a change or a state directory).
    fn when_written(&mut self, changed: bool) -> Option<WriteDone> {
        if !changed {
            return None;
        }
        let persister = self.persister.as_mut()?;
        let (reply, done) = oneshot::channel();
        let version = persister.changed();
        persister.when_written(version, reply, ());
        Some(done)
    }

    /// Hands the records to the writer if they changed since the last
    /// write and none runs.
    pub(super) fn flush(&mut self) {
        if let Some(persister) = &mut self.persister {
            let records = self.published.borrow();
            persister.flush(|| DraCheckpoint::of(&records));
        }
    }

    /// The end of the running write; never, with none running.
    pub(super) async fn next_written(&mut self) -> Written {
        Persister::next_of(&mut self.persister).await
    }

    /// A checkpoint write ended; says whether the checkpoint's problem
    /// changed.
    pub(super) fn on_written(&mut self, written: Written) -> bool {
        let Some(persister) = &mut self.persister else {
            return false;
        };
        let failed_before = persister.last_error().is_some();
        if let Err((e, _)) = persister.on_written(written) {
            tracing::error!(error = %e, "cannot write the DRA claims checkpoint");
            return true;
        }
        failed_before
    }

    /// What is wrong with the checkpoint: the last write failed, or it
    /// could not be loaded or was repaired at start.
    pub(super) fn problem(&self) -> Option<CheckpointProblem> {
        self.persister.as_ref().and_then(Persister::problem)
    }

    /// Writes what is not written yet and waits for it: the owner's last
    /// act.
    pub(super) async fn finish(self) {
        if let Some(persister) = self.persister {
            let records = self.published.borrow().clone();
            persister.finish(|| DraCheckpoint::of(&records)).await;
        }
    }
}

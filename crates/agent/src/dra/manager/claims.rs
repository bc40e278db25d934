//! The DRA manager's record of prepared claims: loaded from the checkpoint
//! at start, changed by commands, and written by the persister, whose
//! completion answers the callers waiting for it to be on disk.

use super::*;

impl Owner {
    /// Changes the prepared claims with `change` (which says whether it
    /// changed anything) and publishes them. The published copy is the only
    /// one: it is changed in place unless a reader still holds it, so a
    /// change costs a copy of the whole set only then.
    pub(super) fn change_claims(
        &mut self,
        change: impl FnOnce(&mut PreparedClaims) -> bool,
    ) -> bool {
        self.prepared.send_if_modified(|claims| {
            let claims = Arc::make_mut(claims);
            let changed = change(claims);
            if changed {
                claims.changed();
            }
            changed
        })
    }

    /// Publishes the prepared claims after a change and answers `reply` once
    /// they are on disk (at once without a change or a state directory).
    pub(super) fn claims_changed(&mut self, changed: bool, reply: WrittenReply) {
        if !changed {
            let _ = reply.send(Ok(()));
            return;
        }
        match &mut self.persister {
            Some(persister) => {
                let version = persister.changed();
                persister.when_written(version, reply, ());
            }
            None => {
                let _ = reply.send(Ok(()));
            }
        }
    }

    /// The end of the write that holds the current claims, when `changed`
    /// (none without a change or a state directory).
    pub(super) fn when_written(&mut self, changed: bool) -> Option<WriteDone> {
        if !changed {
            return None;
        }
        let persister = self.persister.as_mut()?;
        let (reply, done) = tokio::sync::oneshot::channel();
        let version = persister.changed();
        persister.when_written(version, reply, ());
        Some(done)
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
}

//! Keeping a checkpoint up to date without waiting for the disk: whoever
//! changes the state (under the lock that guards it and its persister)
//! marks the change, the writer writes the newest state in the background,
//! and whoever must not go on before a change is on disk waits for the
//! write that includes it. The ends of the writes ([`Ends`]) go to one
//! task, which hands each back to the persister; a waiter may leave what
//! undoes its change, and a failed write hands that back.
//!
//! It opens the checkpoint too ([`Persister::open`]): the owner gets what
//! was on disk, and the persister keeps how the load went, so that "what is
//! wrong with the checkpoint" ([`Persister::problem`]) has one answer for
//! every owner: the last write failed, or the file was unreadable or
//! repaired from its backup at start.
//!
//! Writes are coalesced: while one is running, further changes only mark the
//! state dirty, and the next write (with everything so far) starts when the
//! running one ends. So a burst of changes costs at most two writes, the
//! newest state is always written last, and the state is copied once per
//! write rather than once per change.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use super::{CheckpointError, CheckpointFile, CheckpointProblem};

/// What a write of the changes up to `version` came to.
pub(crate) struct Written {
    version: u64,
    result: Result<(), Arc<CheckpointError>>,
}

/// Told when the change it waits for is on disk, or why it is not.
pub(crate) type WrittenReply = oneshot::Sender<Result<(), Arc<CheckpointError>>>;

/// What waits for a change to be on disk: the other end of a
/// [`WrittenReply`].
pub(crate) type WriteDone = oneshot::Receiver<Result<(), Arc<CheckpointError>>>;

/// The ends of a persister's writes, each for [`Persister::on_written`].
pub(crate) type Ends = mpsc::UnboundedReceiver<Written>;

/// The changing side of a checkpoint; `U` is what undoes a change whose
/// write failed (nothing, for a state that keeps its changes anyway).
pub(crate) struct Persister<T, U = ()> {
    to_writer: mpsc::UnboundedSender<(u64, T)>,
    /// Counts changes.
    version: u64,
    /// The version of the newest state handed to the writer.
    submitted: u64,
    in_flight: bool,
    waiters: Vec<(u64, WrittenReply, U)>,
    last_error: Option<Arc<CheckpointError>>,
    /// Why the checkpoint could not be loaded, or how it was repaired.
    load_problem: Option<CheckpointProblem>,
}

impl<T: Serialize + Send + 'static, U> Persister<T, U> {
    /// Loads `file` (an empty state when it is missing; a damaged file is
    /// repaired from its backup) and starts its writer on `tasks`: the
    /// persister, and what was loaded (`None`: unreadable, nothing to
    /// restore), with the ends of its writes. What went wrong is logged
    /// once and kept for [`Self::problem`].
    pub(crate) async fn open<L>(
        file: CheckpointFile,
        tasks: &TaskTracker,
    ) -> (Self, Ends, Option<L>)
    where
        L: DeserializeOwned + Default + Send + 'static,
    {
        let what = file.what();
        let reading = file.clone();
        let loaded = tokio::task::spawn_blocking(move || reading.load::<L>()).await;
        let (data, load_problem) = match loaded {
            Ok(Ok(loaded)) => {
                let problem = loaded.recovered.map(|recovered| {
                    tracing::warn!("{recovered}");
                    CheckpointProblem::Recovered(Arc::new(recovered))
                });
                (Some(loaded.data), problem)
            }
            Ok(Err(e)) => {
                tracing::error!(checkpoint = what, error = %e, "checkpoint not restored");
                (None, Some(CheckpointProblem::Unreadable(Arc::new(e))))
            }
            Err(e) => {
                tracing::error!(checkpoint = what, error = %e, "checkpoint not restored");
                (None, None)
            }
        };
        let (mut persister, ends) = Self::start(file, tasks);
        persister.load_problem = load_problem;
        (persister, ends, data)
    }

    /// Starts the writer of `file` on `tasks`: the persister, and the ends
    /// of its writes. The writer stops once the persister is dropped.
    pub(crate) fn start(file: CheckpointFile, tasks: &TaskTracker) -> (Self, Ends) {
        let (to_writer, mut from_owner) = mpsc::unbounded_channel::<(u64, T)>();
        let (to_owner, done) = mpsc::unbounded_channel();
        tasks.spawn(async move {
            while let Some((version, data)) = from_owner.recv().await {
                let writing = file.clone();
                let result = tokio::task::spawn_blocking(move || writing.write(&data))
                    .await
                    .unwrap_or_else(|e| Err(file.io(std::io::Error::other(e))))
                    .map_err(Arc::new);
                if to_owner.send(Written { version, result }).is_err() {
                    return;
                }
            }
        });
        let persister = Self {
            to_writer,
            version: 0,
            submitted: 0,
            in_flight: false,
            waiters: Vec::new(),
            last_error: None,
            load_problem: None,
        };
        (persister, done)
    }

    /// Marks the state changed; returns the change's version.
    pub(crate) fn changed(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// Answers `reply` once the state of `version` (or newer) is written;
    /// if that write fails, `undo` comes back from [`Self::on_written`].
    pub(crate) fn when_written(&mut self, version: u64, reply: WrittenReply, undo: U) {
        self.waiters.push((version, reply, undo));
    }

    /// Hands the current state to the writer if it changed since the last
    /// write and no write is running; `state` builds it only then.
    pub(crate) fn flush(&mut self, state: impl FnOnce() -> T) {
        if self.in_flight || self.submitted == self.version {
            return;
        }
        if self.to_writer.send((self.version, state())).is_ok() {
            self.in_flight = true;
            self.submitted = self.version;
        }
    }

    /// Whether a write runs.
    pub(crate) fn writing(&self) -> bool {
        self.in_flight
    }

    /// Records the end of a write and answers those waiting for it. A failed
    /// write is returned for the caller to act on, with the undo of every
    /// change it answered.
    pub(crate) fn on_written(
        &mut self,
        written: Written,
    ) -> Result<(), (Arc<CheckpointError>, Vec<U>)> {
        self.in_flight = false;
        let Written { version, result } = written;
        let (done, waiting) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|(wanted, _, _)| *wanted <= version);
        self.waiters = waiting;
        let mut undo = Vec::new();
        for (_, reply, change) in done {
            let _ = reply.send(result.clone());
            undo.push(change);
        }
        self.last_error = result.as_ref().err().cloned();
        result.map_err(|e| (e, undo))
    }

    /// Why the last write failed, while no later write succeeded.
    pub(crate) fn last_error(&self) -> Option<Arc<CheckpointError>> {
        self.last_error.clone()
    }

    /// What is wrong with the checkpoint: the last write failed, or it
    /// could not be loaded or was repaired at start.
    pub(crate) fn problem(&self) -> Option<CheckpointProblem> {
        self.last_error
            .clone()
            .map(CheckpointProblem::Write)
            .or_else(|| self.load_problem.clone())
    }
}

/// Writes out what is not written yet, for the last act of whoever holds a
/// persister: `flush` hands the state to the writer if it changed and says
/// whether a write runs; each write's end goes to `on_written`. Returns once
/// none runs.
pub(crate) async fn write_out(
    ends: &mut Ends,
    mut flush: impl FnMut() -> bool,
    mut on_written: impl FnMut(Written),
) {
    while flush() {
        let Some(written) = ends.recv().await else {
            return;
        };
        on_written(written);
    }
}

#[cfg(test)]
mod tests;

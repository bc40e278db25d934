//! What the handles of every owner task share (see docs/architecture.md,
//! "One shape for every subsystem"): sending commands and waiting for the
//! answer, and waiting for a condition on the owner's state.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

/// The owner task has stopped: a command could not be delivered or answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gone;

/// Sends commands to an owner task. Cheap to clone.
pub(crate) struct Mailbox<C> {
    tx: mpsc::UnboundedSender<C>,
}

impl<C> Clone for Mailbox<C> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<C> Mailbox<C> {
    /// A mailbox and the owner's end of it.
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<C>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// Sends a command that needs no answer.
    pub(crate) fn send(&self, command: C) -> Result<(), Gone> {
        self.tx.send(command).map_err(|_| Gone)
    }

    /// Sends the command `request` builds around a reply channel, and waits
    /// for the answer.
    pub(crate) async fn ask<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<T>) -> C,
    ) -> Result<T, Gone> {
        let (reply, answer) = oneshot::channel();
        self.send(request(reply))?;
        answer.await.map_err(|_| Gone)
    }

    /// Whether the owner task has stopped.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Reads the state with `read` until `pred` holds, again after each tick of
/// `changes`, and returns it; `None` after `timeout`.
pub(crate) async fn wait_for<T, E, F>(
    changes: &watch::Receiver<u64>,
    timeout: Duration,
    stopped: E,
    mut read: impl FnMut() -> F,
    mut pred: impl FnMut(&[T]) -> bool,
) -> Result<Option<Vec<T>>, E>
where
    F: Future<Output = Result<Vec<T>, E>>,
{
    let mut changes = changes.clone();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        changes.mark_unchanged();
        let state = read().await?;
        if pred(&state) {
            return Ok(Some(state));
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(stopped),
            Err(_) => return Ok(None),
        }
    }
}

//! What the handles of every owner task share (see docs/architecture.md,
//! "One shape for every subsystem"): sending commands and waiting for the
//! answer. Reading the owner's state is [`crate::published`]'s.

use tokio::sync::{mpsc, oneshot};

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

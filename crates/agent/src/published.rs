//! The one way an owner shows its state: after each change it publishes an
//! immutable snapshot, and any number of readers hold a cheap [`Store`] that
//! reads the latest one, follows changes and waits for a condition, without
//! asking the owner anything (see docs/architecture.md, "One shape for every
//! subsystem").
//!
//! The owner keeps the `Publisher`. A snapshot type says through [`Ready`]
//! whether the owner had started when it was published (the first snapshot,
//! made before the owner runs, is not ready), so that readers can wait until
//! the state they read is the running owner's.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Whether a snapshot was published by the running owner.
pub trait Ready {
    /// Whether the owner was running (and had loaded what it restores) when
    /// this snapshot was published.
    fn ready(&self) -> bool;
}

/// The owner stopped: no snapshot will be published any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the owner of this state stopped")]
pub struct Closed;

/// The owner's end: publishes each new snapshot and counts the changes.
#[derive(Debug)]
pub(crate) struct Publisher<S> {
    snapshot: watch::Sender<Arc<S>>,
    changes: watch::Sender<u64>,
}

impl<S> Publisher<S> {
    /// A publisher whose first snapshot is `initial`, and a reader of it.
    pub(crate) fn new(initial: S) -> (Self, Store<S>) {
        let (snapshot, snapshot_rx) = watch::channel(Arc::new(initial));
        let (changes, changes_rx) = watch::channel(0);
        let store = Store {
            snapshot: snapshot_rx,
            changes: changes_rx,
        };
        (Self { snapshot, changes }, store)
    }

    /// Publishes `next` as the latest snapshot.
    pub(crate) fn publish(&self, next: S) {
        self.publish_arc(Arc::new(next));
    }

    /// Publishes `next`, already shared, as the latest snapshot.
    pub(crate) fn publish_arc(&self, next: Arc<S>) {
        self.snapshot.send_replace(next);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Publishes `next` only if it differs from the latest snapshot; returns
    /// whether it did. (Only the Kubernetes API publisher needs it.)
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn publish_if_changed(&self, next: S) -> bool
    where
        S: PartialEq,
    {
        let changed = self.snapshot.send_if_modified(|current| {
            if **current == next {
                return false;
            }
            *current = Arc::new(next);
            true
        });
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
        changed
    }

    /// Changes the latest snapshot in place with `change`, which says
    /// whether it changed anything (a copy is made only while a reader
    /// holds the snapshot, `Arc::make_mut`); returns whether it did.
    pub(crate) fn modify(&self, change: impl FnOnce(&mut Arc<S>) -> bool) -> bool {
        let changed = self.snapshot.send_if_modified(change);
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
        changed
    }

    /// The latest snapshot.
    pub(crate) fn current(&self) -> Arc<S> {
        self.snapshot.borrow().clone()
    }

    /// A new reader.
    pub(crate) fn store(&self) -> Store<S> {
        Store {
            snapshot: self.snapshot.subscribe(),
            changes: self.changes.subscribe(),
        }
    }
}

/// A reader's end: the latest snapshot, its changes, and waiting for a
/// condition on it. Cheap to clone; reading never waits for the owner.
#[derive(Debug)]
pub struct Store<S> {
    snapshot: watch::Receiver<Arc<S>>,
    changes: watch::Receiver<u64>,
}

impl<S> Clone for Store<S> {
    fn clone(&self) -> Self {
        Self {
            snapshot: self.snapshot.clone(),
            changes: self.changes.clone(),
        }
    }
}

impl<S> Store<S> {
    /// The latest snapshot.
    pub fn get(&self) -> Arc<S> {
        self.snapshot.borrow().clone()
    }

    /// A counter that increases on every change, for following the state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// The snapshots themselves, for following them with their values.
    pub fn subscribe(&self) -> watch::Receiver<Arc<S>> {
        self.snapshot.clone()
    }

    /// Waits for the next change; [`Closed`] once the owner stopped.
    pub async fn changed(&mut self) -> Result<Arc<S>, Closed> {
        self.snapshot.changed().await.map_err(|_| Closed)?;
        Ok(self.snapshot.borrow_and_update().clone())
    }
}

impl<S: Ready> Store<S> {
    /// The first snapshot of the running owner for which `pred` holds, with
    /// no deadline; [`Closed`] once the owner stopped.
    pub async fn wait_until(&self, mut pred: impl FnMut(&S) -> bool) -> Result<Arc<S>, Closed> {
        let mut snapshot = self.snapshot.clone();
        let found = snapshot
            .wait_for(|s| s.ready() && pred(s))
            .await
            .map_err(|_| Closed)?;
        Ok(found.clone())
    }

    /// The latest snapshot once the owner runs.
    pub async fn wait_until_ready(&self) -> Result<Arc<S>, Closed> {
        let mut snapshot = self.snapshot.clone();
        let ready = snapshot.wait_for(|s| s.ready()).await.map_err(|_| Closed)?;
        Ok(ready.clone())
    }

    /// Reads the running owner's state with `read` until `pred` holds, again
    /// after each change, and returns what it read; `None` after `timeout`
    /// (which includes waiting for the owner to run).
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut read: impl FnMut(&S) -> T,
        mut pred: impl FnMut(&T) -> bool,
    ) -> Result<Option<T>, Closed> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut snapshot = self.snapshot.clone();
        loop {
            let current = snapshot.borrow_and_update().clone();
            if current.ready() {
                let value = read(&current);
                if pred(&value) {
                    return Ok(Some(value));
                }
            }
            match tokio::time::timeout_at(deadline, snapshot.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Closed),
                Err(_) => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Counted {
        running: bool,
        n: u32,
    }

    impl Ready for Counted {
        fn ready(&self) -> bool {
            self.running
        }
    }

    #[tokio::test]
    async fn readers_see_each_change_and_a_repeat_is_not_one() {
        let (publisher, store) = Publisher::new(Counted::default());
        let changes = store.changes();
        publisher.publish(Counted {
            running: true,
            n: 1,
        });
        assert_eq!(store.get().n, 1);
        assert_eq!(*changes.borrow(), 1);
        assert!(!publisher.publish_if_changed(Counted {
            running: true,
            n: 1
        }));
        assert_eq!(*changes.borrow(), 1);
        assert!(publisher.publish_if_changed(Counted {
            running: true,
            n: 2
        }));
        assert_eq!(*changes.borrow(), 2);
        assert_eq!(publisher.current().n, 2);
    }

    #[tokio::test]
    async fn waiting_reads_only_the_running_owners_state() {
        let (publisher, store) = Publisher::new(Counted::default());
        let waiter = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .wait_for(Duration::from_secs(10), |s| s.n, |n| *n == 0)
                    .await
            }
        });
        // Not ready: the initial `n == 0` must not satisfy the waiter.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        publisher.publish(Counted {
            running: true,
            n: 0,
        });
        assert_eq!(waiter.await.ok(), Some(Ok(Some(0))));
        assert!(store.wait_until_ready().await.is_ok());
    }

    #[tokio::test]
    async fn waiting_gives_up_at_its_deadline_and_fails_once_the_owner_stopped() {
        let (publisher, store) = Publisher::new(Counted {
            running: true,
            n: 0,
        });
        let none = store
            .wait_for(Duration::from_millis(20), |s| s.n, |n| *n == 1)
            .await;
        assert_eq!(none, Ok(None));
        drop(publisher);
        let closed = store
            .wait_for(Duration::from_secs(10), |s| s.n, |n| *n == 1)
            .await;
        assert_eq!(closed, Err(Closed));
        let mut store = store;
        assert_eq!(store.changed().await.err(), Some(Closed));
    }
}

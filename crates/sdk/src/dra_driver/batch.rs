//! Serialized calls served together. While one batch of prepares (or of
//! unprepares) holds the serialization lock, the calls that arrive wait in
//! a queue; the next batch takes them all at once: one driver call, one
//! record write before it and one after, for as many kubelet calls as were
//! waiting. Calls still see each other's effects in order (a batch is one
//! serialized call). A batch goes on while any of its calls waits for it,
//! and is dropped once every one has gone away (the kubelet gave up on
//! them), as a single call is: a driver that hangs holds the lock no longer
//! than the calls that wait for it.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;
use tonic::Status;

/// What a call gets: a result per claim UID, or the whole call's error.
pub(super) type Answer<O> = Result<HashMap<String, O>, Status>;

/// A call waiting for a batch: its claims, and where its answer goes.
pub(super) struct Waiter<I, O> {
    items: Vec<I>,
    reply: oneshot::Sender<Answer<O>>,
}

/// The calls waiting for the next batch.
pub(super) struct Queue<I, O> {
    waiting: Mutex<Vec<Waiter<I, O>>>,
}

impl<I, O> Default for Queue<I, O> {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
        }
    }
}

impl<I, O> Queue<I, O> {
    /// Queues a call of `items`; the receiver gets its answer.
    pub(super) fn push(&self, items: Vec<I>) -> oneshot::Receiver<Answer<O>> {
        let (reply, answer) = oneshot::channel();
        self.lock().push(Waiter { items, reply });
        answer
    }

    /// Takes every waiting call.
    pub(super) fn take(&self) -> Vec<Waiter<I, O>> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiter<I, O>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where each call of a batch gets its answer: the UIDs it asked for.
pub(super) struct Replies<O> {
    calls: Vec<(Vec<String>, oneshot::Sender<Answer<O>>)>,
}

/// The claims of `waiters`, each UID (given by `uid`) once, and where
/// their answers go.
pub(super) fn split<I, O>(
    waiters: Vec<Waiter<I, O>>,
    uid: impl Fn(&I) -> &str,
) -> (Vec<I>, Replies<O>) {
    let mut seen = HashSet::new();
    let mut items = Vec::new();
    let mut calls = Vec::with_capacity(waiters.len());
    for waiter in waiters {
        let uids = waiter.items.iter().map(|i| uid(i).to_string()).collect();
        for item in waiter.items {
            if seen.insert(uid(&item).to_string()) {
                items.push(item);
            }
        }
        calls.push((uids, waiter.reply));
    }
    (items, Replies { calls })
}

impl<O> Replies<O> {
    /// Returns once every call of the batch has gone away.
    pub(super) async fn all_gone(&mut self) {
        let gone = self.calls.iter_mut().map(|(_, reply)| reply.closed());
        futures::future::join_all(gone).await;
    }
}

impl<O: Clone> Replies<O> {
    /// Gives each call the results of its own claims; a claim without one
    /// gets `missing(uid)`.
    pub(super) fn answer(self, results: Answer<O>, missing: impl Fn(&str) -> O) {
        for (uids, reply) in self.calls {
            let answer = match &results {
                Ok(results) => Ok(uids
                    .into_iter()
                    .map(|uid| {
                        let result = results.get(&uid).cloned();
                        let result = result.unwrap_or_else(|| missing(&uid));
                        (uid, result)
                    })
                    .collect()),
                Err(status) => Err(status.clone()),
            };
            // A call that went away needs no answer.
            let _ = reply.send(answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_call_gets_the_results_of_its_own_claims_and_a_shared_claim_runs_once() {
        let queue: Queue<String, u32> = Queue::default();
        let first = queue.push(vec!["a".into(), "b".into()]);
        let second = queue.push(vec!["b".into(), "c".into()]);
        let (items, replies) = split(queue.take(), |i| i.as_str());
        assert_eq!(items, ["a", "b", "c"]);
        assert!(queue.take().is_empty());
        let results = HashMap::from([("a".to_string(), 1), ("b".to_string(), 2)]);
        replies.answer(Ok(results), |_| 0);
        let first = first.await.unwrap().unwrap();
        assert_eq!(first, HashMap::from([("a".into(), 1), ("b".into(), 2)]));
        let second = second.await.unwrap().unwrap();
        assert_eq!(second, HashMap::from([("b".into(), 2), ("c".into(), 0)]));
    }

    #[tokio::test]
    async fn a_batch_is_given_up_only_once_every_call_has_gone() {
        let queue: Queue<String, u32> = Queue::default();
        let first = queue.push(vec!["a".into()]);
        let second = queue.push(vec!["b".into()]);
        let (_, mut replies) = split(queue.take(), |i| i.as_str());
        drop(first);
        let gone = tokio::time::timeout(std::time::Duration::from_millis(50), replies.all_gone());
        assert!(gone.await.is_err(), "one call still waits");
        drop(second);
        replies.all_gone().await;
    }

    #[tokio::test]
    async fn a_batch_that_fails_fails_every_call() {
        let queue: Queue<String, u32> = Queue::default();
        let call = queue.push(vec!["a".into()]);
        let (_, replies) = split(queue.take(), |i| i.as_str());
        replies.answer(Err(Status::internal("lock")), |_| 0);
        assert_eq!(call.await.unwrap().unwrap_err().message(), "lock");
    }
}

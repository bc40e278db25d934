//! The probes' results of one pod, by container id and kind, as the
//! kubelet's results caches keep them: a new container starts not ready
//! (readiness failure), alive (liveness success) and not started (startup
//! unknown); a change wakes the pod's worker. And what they make of a
//! container for its status and its runs: started once its startup probe
//! succeeded (at once without one), ready once started and its readiness
//! probe succeeded (at once without one), killed when its liveness or
//! startup probe failed.
//!
//! A container that ran before the agent started (by more than 10 s, the
//! kubelet's `kubeletRestartGracePeriod`) gets no first value: until its
//! probes answer it keeps what the pod's status said (started; ready when
//! the pod was `Ready`), as the kubelet keeps it across its restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::spec::ProbeKind;

/// What a container's status said when the worker was made: its id,
/// whether it was started, whether it was ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Adopted {
    pub(crate) container_id: String,
    pub(crate) started: bool,
    pub(crate) ready: bool,
}

/// What the probes say of one container, for its status and its runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Probed {
    /// Its startup probe has not succeeded.
    pub(crate) not_started: bool,
    /// Its readiness probe has not succeeded (or it has not started).
    pub(crate) not_ready: bool,
    /// The probe whose failure kills it.
    pub(crate) kill: Option<ProbeKind>,
}

#[derive(Default)]
struct Inner {
    /// (container id, kind) → success; absent: unknown.
    values: BTreeMap<(String, ProbeKind), bool>,
    /// Container name → the kinds of probe it has.
    kinds: BTreeMap<String, BTreeSet<ProbeKind>>,
    /// Container name → what its status said before the agent started.
    adopted: BTreeMap<String, Adopted>,
}

/// One pod's results, shared by its probes and its worker.
#[derive(Clone, Default)]
pub(crate) struct Results {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
}

impl Results {
    /// Results for containers with `kinds` of probes, `adopted` as their
    /// statuses said.
    pub(crate) fn new(
        kinds: BTreeMap<String, BTreeSet<ProbeKind>>,
        adopted: BTreeMap<String, Adopted>,
    ) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                values: BTreeMap::new(),
                kinds,
                adopted,
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a result to change.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The result of `kind` for container `id`: `None` unknown.
    pub(crate) fn get(&self, id: &str, kind: ProbeKind) -> Option<bool> {
        self.lock().values.get(&(id.to_string(), kind)).copied()
    }

    /// Sets the result of `kind` for container `id`; the worker is woken
    /// when it changed.
    pub(crate) fn set(&self, id: &str, kind: ProbeKind, success: bool) {
        let old = self.lock().values.insert((id.to_string(), kind), success);
        if old != Some(success) {
            self.changed.notify_one();
        }
    }

    /// Forgets the result of `kind` for container `id` (its probe moved to
    /// a newer container), without waking anyone.
    pub(crate) fn remove(&self, id: &str, kind: ProbeKind) {
        self.lock().values.remove(&(id.to_string(), kind));
    }

    /// Whether container `id` (named `name`) was adopted: it ran before
    /// the agent started, and keeps its status until its probes answer.
    pub(crate) fn adopted(&self, name: &str, id: &str) -> bool {
        self.lock()
            .adopted
            .get(name)
            .is_some_and(|a| a.container_id == id)
    }

    /// Whether running container `id` named `name` started: its startup
    /// probe succeeded, or it has none.
    pub(crate) fn started(&self, name: &str, id: &str) -> bool {
        let inner = self.lock();
        started(&inner, name, id)
    }

    /// What the probes say of running container `id` named `name`.
    pub(crate) fn probed(&self, name: &str, id: &str) -> Probed {
        let inner = self.lock();
        let Some(kinds) = inner.kinds.get(name) else {
            return Probed::default();
        };
        let value = |kind| inner.values.get(&(id.to_string(), kind)).copied();
        let adopted = inner.adopted.get(name).filter(|a| a.container_id == id);
        let started = started(&inner, name, id);
        let ready = started
            && (!kinds.contains(&ProbeKind::Readiness)
                || match value(ProbeKind::Readiness) {
                    Some(ready) => ready,
                    None => adopted.is_some_and(|a| a.ready),
                });
        let kill = if kinds.contains(&ProbeKind::Liveness)
            && value(ProbeKind::Liveness) == Some(false)
        {
            Some(ProbeKind::Liveness)
        } else if kinds.contains(&ProbeKind::Startup) && value(ProbeKind::Startup) == Some(false) {
            Some(ProbeKind::Startup)
        } else {
            None
        };
        Probed {
            not_started: !started,
            not_ready: !ready,
            kill,
        }
    }
}

fn started(inner: &Inner, name: &str, id: &str) -> bool {
    let has_startup = inner
        .kinds
        .get(name)
        .is_some_and(|k| k.contains(&ProbeKind::Startup));
    if !has_startup {
        return true;
    }
    match inner.values.get(&(id.to_string(), ProbeKind::Startup)) {
        Some(success) => *success,
        None => inner
            .adopted
            .get(name)
            .is_some_and(|a| a.container_id == id && a.started),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(kinds: &[ProbeKind], adopted: Option<Adopted>) -> Results {
        let kinds = BTreeMap::from([("app".to_string(), kinds.iter().copied().collect())]);
        let adopted = adopted
            .map(|a| BTreeMap::from([("app".to_string(), a)]))
            .unwrap_or_default();
        Results::new(kinds, adopted)
    }

    #[test]
    fn a_container_without_probes_is_started_and_ready() {
        let r = results(&[], None);
        assert_eq!(r.probed("app", "c1"), Probed::default());
        assert_eq!(r.probed("other", "c2"), Probed::default());
    }

    #[test]
    fn startup_holds_readiness_and_failures_kill() {
        let all = [
            ProbeKind::Startup,
            ProbeKind::Readiness,
            ProbeKind::Liveness,
        ];
        let r = results(&all, None);
        let p = r.probed("app", "c1");
        assert!(p.not_started && p.not_ready && p.kill.is_none());
        r.set("c1", ProbeKind::Startup, true);
        r.set("c1", ProbeKind::Readiness, false);
        let p = r.probed("app", "c1");
        assert!(!p.not_started && p.not_ready);
        r.set("c1", ProbeKind::Readiness, true);
        assert_eq!(r.probed("app", "c1"), Probed::default());
        r.set("c1", ProbeKind::Liveness, false);
        assert_eq!(r.probed("app", "c1").kill, Some(ProbeKind::Liveness));
        r.set("c2", ProbeKind::Startup, false);
        assert_eq!(r.probed("app", "c2").kill, Some(ProbeKind::Startup));
    }

    #[test]
    fn an_adopted_container_keeps_its_status_until_its_probes_answer() {
        let adopted = Adopted {
            container_id: "c1".into(),
            started: true,
            ready: true,
        };
        let r = results(&[ProbeKind::Startup, ProbeKind::Readiness], Some(adopted));
        assert_eq!(r.probed("app", "c1"), Probed::default());
        r.set("c1", ProbeKind::Readiness, false);
        assert!(r.probed("app", "c1").not_ready);
        // A newer container starts over.
        assert!(r.probed("app", "c2").not_started);
    }

    #[tokio::test]
    async fn a_change_wakes_the_worker_and_a_repeat_does_not() {
        let r = results(&[ProbeKind::Readiness], None);
        r.set("c1", ProbeKind::Readiness, true);
        tokio::time::timeout(std::time::Duration::from_secs(1), r.changed())
            .await
            .unwrap();
        r.set("c1", ProbeKind::Readiness, true);
        let woken = tokio::time::timeout(std::time::Duration::from_millis(50), r.changed()).await;
        assert!(woken.is_err(), "an unchanged result woke the worker");
    }
}

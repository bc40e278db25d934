//! The order in which a pod with sidecars stops, as the kubelet's
//! `terminationOrdering`: every container is asked to stop at once, and a
//! sidecar (a restartable init container) waits, within what is left of
//! its grace period, until every app container and every sidecar started
//! after it has exited: sidecars go last, in the reverse of their start.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

/// Who waits for whom while a pod stops.
pub(crate) struct TerminationOrder {
    /// Cancelled once the container of the name has exited (at once for
    /// one not running).
    terminated: BTreeMap<String, CancellationToken>,
    /// What each sidecar waits for.
    prereqs: BTreeMap<String, Vec<CancellationToken>>,
}

impl TerminationOrder {
    /// The order of `pod`'s containers, of which those named in `running`
    /// run.
    pub(crate) fn new(pod: &Pod, running: &[&str]) -> Self {
        let mut order = Self {
            terminated: BTreeMap::new(),
            prereqs: BTreeMap::new(),
        };
        let Some(spec) = pod.spec.as_ref() else {
            return order;
        };
        let exited = |name: &str| {
            let token = CancellationToken::new();
            if !running.contains(&name) {
                token.cancel();
            }
            token
        };
        let apps: Vec<CancellationToken> = spec
            .containers
            .iter()
            .map(|c| {
                let token = exited(&c.name);
                order.terminated.insert(c.name.clone(), token.clone());
                token
            })
            .collect();
        let mut later_sidecar: Option<CancellationToken> = None;
        for init in spec.init_containers.iter().flatten().rev() {
            let token = exited(&init.name);
            order.terminated.insert(init.name.clone(), token.clone());
            if init.restart_policy.as_deref() == Some("Always") {
                let mut waits = apps.clone();
                waits.extend(later_sidecar.take());
                order.prereqs.insert(init.name.clone(), waits);
                later_sidecar = Some(token);
            }
        }
        order
    }

    /// Waits, at most `grace` seconds, until every container `name` waits
    /// for has exited; the whole seconds waited.
    pub(crate) async fn wait_for_turn(&self, name: &str, grace: i64) -> i64 {
        let Some(waits) = self.prereqs.get(name) else {
            return 0;
        };
        if grace <= 0 {
            return 0;
        }
        let start = tokio::time::Instant::now();
        let limit = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        let all = futures::future::join_all(waits.iter().map(CancellationToken::cancelled));
        let _ = tokio::time::timeout(limit, all).await;
        i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX)
    }

    /// Container `name` has exited.
    pub(crate) fn terminated(&self, name: &str) {
        if let Some(token) = self.terminated.get(name) {
            token.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [
                    {"name": "first", "restartPolicy": "Always"},
                    {"name": "setup"},
                    {"name": "second", "restartPolicy": "Always"},
                ],
                "containers": [{"name": "app"}, {"name": "other"}],
            },
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_the_app_containers_then_for_the_sidecars_started_after_them() {
        let pod = pod();
        let order = TerminationOrder::new(&pod, &["first", "second", "app", "other"]);
        // Nothing waits on an app container.
        assert_eq!(order.wait_for_turn("app", 30).await, 0);
        order.terminated("app");
        // `other` still runs: the sidecars wait until their grace is out.
        assert_eq!(order.wait_for_turn("second", 5).await, 5);
        order.terminated("other");
        assert_eq!(order.wait_for_turn("second", 30).await, 0);
        // `first` waits for `second` too.
        assert_eq!(order.wait_for_turn("first", 3).await, 3);
        order.terminated("second");
        assert_eq!(order.wait_for_turn("first", 30).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_container_not_running_is_waited_for_by_no_one() {
        let pod = pod();
        let order = TerminationOrder::new(&pod, &["first"]);
        assert_eq!(order.wait_for_turn("first", 30).await, 0);
    }
}

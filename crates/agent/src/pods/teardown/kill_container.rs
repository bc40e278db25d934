//! One container stopped as the kubelet's `killContainer` stops it,
//! whatever the reason (the pod deleted or killed, a probe failed, its
//! `postStart` hook failed): a Normal `Killing` Event on the container
//! ("Stopping container app" unless the reason says otherwise), its
//! `preStop` hook run within the grace period (what it takes is taken from
//! the grace; a hook still running when the grace is out goes on, and its
//! failure is a Warning `FailedPreStopHook` Event whose message never
//! carries the hook's output), a sidecar's turn waited for, then the
//! runtime's stop with what is left of the grace, never under 2 s.
//! Grace periods are whole seconds, as the kubelet counts them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio_util::sync::CancellationToken;

use super::termination_order::TerminationOrder;
use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;
use crate::pods::kube_events::PodEvents;
use crate::pods::pod::PodRef;
use crate::pods::run::hooks::{Hook, HookTarget, run_hook};
use crate::pods::run::lifecycle_metrics::LifecycleMetrics;
use crate::runtime::{ContainerRuntime, RuntimeError};

/// The shortest grace the kubelet gives a container
/// (`minimumGracePeriodInSeconds`).
pub(crate) const MINIMUM_GRACE_SECONDS: i64 = 2;
/// The reason of the Event of a container being stopped.
pub(crate) const KILLING: &str = "Killing";
/// The reason of the Event of a `preStop` hook that failed.
const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";

/// What stops the containers of one pod.
#[derive(Clone)]
pub(crate) struct PodKiller {
    pub(crate) runtime: Arc<dyn ContainerRuntime>,
    pub(crate) events: PodEvents,
    pub(crate) pod_ref: PodRef,
    /// The pod, when known: the containers' hooks and the Events' field
    /// paths (none, and no Event, for a pod known only by its containers,
    /// as the kubelet records none for a pod restored from its labels).
    pub(crate) pod: Option<Arc<Pod>>,
    /// The pod's address, for an `httpGet` hook without a host.
    pub(crate) pod_ip: Option<String>,
    /// The hooks' metrics.
    pub(crate) lifecycle_metrics: LifecycleMetrics,
}

/// One container to stop.
pub(crate) struct ContainerKill<'a> {
    /// Its runtime id.
    pub(crate) id: &'a str,
    pub(crate) name: &'a str,
    /// The `Killing` Event's message; none: "Stopping container `name`".
    pub(crate) message: Option<&'a str>,
    /// Its grace period, in seconds.
    pub(crate) grace: i64,
    /// The pod's termination order, when it has sidecars.
    pub(crate) order: Option<&'a TerminationOrder>,
}

impl PodKiller {
    /// Stops `kill`'s container; a container already gone is stopped.
    pub(crate) async fn kill(&self, kill: &ContainerKill<'_>) -> Result<(), RuntimeError> {
        let spec = self.container(kill.name);
        if let Some((container, kind)) = &spec {
            let message = kill.message.map_or_else(
                || format!("Stopping container {}", container.name),
                str::to_string,
            );
            self.event(*kind, &container.name, "Normal", KILLING, message);
        }
        let mut grace = kill.grace;
        if let Some((container, kind)) = &spec
            && let Some(pre_stop) = container
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
            && grace > 0
        {
            let hook = Hook::of(pre_stop, container);
            grace -= self.pre_stop(hook, kill.id, container, *kind, grace).await;
        }
        if let Some(order) = kill.order
            && grace > 0
        {
            grace -= order.wait_for_turn(kill.name, grace).await;
        }
        let grace = grace.max(MINIMUM_GRACE_SECONDS);
        tracing::debug!(container = kill.name, grace, "stopping the container");
        let stopped = self
            .runtime
            .stop_container(kill.id, Duration::from_secs(grace.unsigned_abs()))
            .await;
        match stopped {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        if let Some(order) = kill.order {
            order.terminated(kill.name);
        }
        Ok(())
    }

    /// Runs the `preStop` hook of `container` (id `id`) for at most
    /// `grace` seconds; the whole seconds it took.
    async fn pre_stop(
        &self,
        hook: Hook,
        id: &str,
        container: &Container,
        kind: ContainerKind,
        grace: i64,
    ) -> i64 {
        let start = tokio::time::Instant::now();
        let killer = self.clone();
        let (id, name) = (id.to_string(), container.name.clone());
        let mut run = tokio::spawn(async move {
            let gone = CancellationToken::new();
            let target = HookTarget {
                runtime: killer.runtime.as_ref(),
                container_id: &id,
                container: &name,
                pod: &killer.pod_ref,
                pod_ip: killer.pod_ip.as_deref(),
                gone: &gone,
                events: Some(&killer.events),
                metrics: Some(&killer.lifecycle_metrics),
            };
            if let Err(message) = run_hook(&hook, &target).await {
                tracing::warn!(container = %name, %message, "PreStop hook failed");
                killer.event(
                    kind,
                    &name,
                    "Warning",
                    FAILED_PRE_STOP_HOOK,
                    "PreStopHook failed".into(),
                );
            }
        });
        let limit = Duration::from_secs(grace.unsigned_abs());
        tokio::select! {
            _ = &mut run => {}
            () = tokio::time::sleep(limit) => {
                tracing::info!(container = %container.name, grace, "PreStop hook not completed in grace period");
            }
        }
        i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX)
    }

    /// Container `name` of the pod, and its kind.
    fn container(&self, name: &str) -> Option<(Container, ContainerKind)> {
        let pod = self.pod.as_deref()?;
        containers(pod)
            .into_iter()
            .find(|(c, _)| c.name == name)
            .map(|(c, kind)| (c.clone(), kind))
    }

    /// Records an Event on container `name` of kind `kind`, without
    /// waiting on the API server.
    pub(crate) fn event(
        &self,
        kind: ContainerKind,
        name: &str,
        type_: &'static str,
        reason: &'static str,
        message: String,
    ) {
        let events = self.events.clone();
        let pod = self.pod_ref.clone();
        let path = crate::pods::run::probes::field_path(name, kind);
        tokio::spawn(async move {
            events
                .on_container(&pod, &path, type_, reason, &message)
                .await;
        });
    }
}

//! Stopping everything a pod runs, as the kubelet's `killPod` does before
//! a pod's resources are given back: every running container stopped at
//! once within the grace period (its `Killing` Event, its `preStop` hook,
//! then SIGTERM, and SIGKILL when the grace runs out), sidecars waiting
//! until the app containers and the sidecars started after them exited;
//! then its sandboxes stopped and removed. The kubelet frees devices and
//! unprepares claims only after this ("resources must be unprepared after
//! all containers have stopped").

use std::time::Duration;

use futures::future::join_all;

use super::kill_container::{ContainerKill, PodKiller};
use super::termination_order::TerminationOrder;
use crate::runtime::{ContainerState, RuntimeError};

/// The shortest grace period the kubelet gives a container
/// (`minimumGracePeriodInSeconds`).
pub(crate) const MINIMUM_GRACE: Duration = Duration::from_secs(2);

/// Stops every container of `killer`'s pod within `grace` and stops and
/// removes its sandboxes. Returns how many containers were running.
pub(crate) async fn terminate(killer: &PodKiller, grace: Duration) -> Result<usize, RuntimeError> {
    let (count, sandboxes) = stop(killer, grace).await?;
    for id in &sandboxes {
        killer
            .runtime
            .remove_sandbox(id)
            .await
            .or_else(ignore_not_found)?;
    }
    Ok(count)
}

/// Stops every container of `killer`'s pod within `grace`, as
/// [`terminate`], and stops its sandboxes, leaving them and their
/// containers for their statuses to be read. Returns how many containers
/// were running, and the sandboxes.
pub(crate) async fn stop(
    killer: &PodKiller,
    grace: Duration,
) -> Result<(usize, Vec<String>), RuntimeError> {
    let runtime = killer.runtime.as_ref();
    let uid = killer.pod_ref.uid.as_str();
    let sandboxes: Vec<String> = runtime
        .sandboxes()
        .await?
        .into_iter()
        .filter(|s| s.pod.uid == uid)
        .map(|s| s.id)
        .collect();
    if sandboxes.is_empty() {
        return Ok((0, sandboxes));
    }
    let running: Vec<_> = runtime
        .containers()
        .await?
        .into_iter()
        .filter(|c| sandboxes.contains(&c.sandbox_id) && c.state == ContainerState::Running)
        .collect();
    let count = running.len();
    let names: Vec<&str> = running.iter().map(|c| c.name.as_str()).collect();
    let order = killer
        .pod
        .as_deref()
        .filter(|pod| {
            pod.spec.as_ref().is_some_and(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .any(|c| c.restart_policy.as_deref() == Some("Always"))
            })
        })
        .map(|pod| TerminationOrder::new(pod, &names));
    let seconds = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let kills = running.iter().map(|c| {
        let kill = ContainerKill {
            id: &c.id,
            name: &c.name,
            message: None,
            grace: seconds,
            order: order.as_ref(),
        };
        async move { killer.kill(&kill).await }
    });
    for result in join_all(kills).await {
        result?;
    }
    for id in &sandboxes {
        runtime.stop_sandbox(id).await.or_else(ignore_not_found)?;
    }
    Ok((count, sandboxes))
}

fn ignore_not_found(e: RuntimeError) -> Result<(), RuntimeError> {
    if e.is_not_found() { Ok(()) } else { Err(e) }
}

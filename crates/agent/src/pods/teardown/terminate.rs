//! Stopping everything a pod runs, as the kubelet's `killPod` does before
//! a pod's resources are given back: its app containers stopped together
//! within the grace period (SIGTERM, then SIGKILL when it runs out), then
//! its sidecars, last started first; then its sandboxes stopped and
//! removed. The kubelet frees devices and unprepares claims only after
//! this ("resources must be unprepared after all containers have
//! stopped").

use std::time::Duration;

use futures::future::join_all;

use crate::runtime::{ContainerRuntime, ContainerState, RuntimeError};

/// The shortest grace period the kubelet gives a container
/// (`minimumGracePeriodInSeconds`).
pub(crate) const MINIMUM_GRACE: Duration = Duration::from_secs(2);

/// Stops every container of pod `uid` within `grace` (app containers
/// first, then the others in reverse order of their start) and stops and
/// removes its sandboxes. Returns how many containers were running.
pub(crate) async fn terminate(
    runtime: &dyn ContainerRuntime,
    uid: &str,
    grace: Duration,
    sidecars: &[String],
) -> Result<usize, RuntimeError> {
    let (count, sandboxes) = stop(runtime, uid, grace, sidecars).await?;
    for id in &sandboxes {
        runtime.remove_sandbox(id).await.or_else(ignore_not_found)?;
    }
    Ok(count)
}

/// Stops every container of pod `uid` within `grace`, as [`terminate`],
/// and stops its sandboxes, leaving them and their containers for their
/// statuses to be read. Returns how many containers were running, and the
/// sandboxes.
pub(crate) async fn stop(
    runtime: &dyn ContainerRuntime,
    uid: &str,
    grace: Duration,
    sidecars: &[String],
) -> Result<(usize, Vec<String>), RuntimeError> {
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
    let (mut last, first): (Vec<_>, Vec<_>) = running
        .into_iter()
        .partition(|c| sidecars.contains(&c.name));
    let stops = first.iter().map(|c| runtime.stop_container(&c.id, grace));
    for result in join_all(stops).await {
        result.or_else(ignore_not_found)?;
    }
    last.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    for c in &last {
        runtime
            .stop_container(&c.id, grace)
            .await
            .or_else(ignore_not_found)?;
    }
    for id in &sandboxes {
        runtime.stop_sandbox(id).await.or_else(ignore_not_found)?;
    }
    Ok((count, sandboxes))
}

fn ignore_not_found(e: RuntimeError) -> Result<(), RuntimeError> {
    if e.is_not_found() { Ok(()) } else { Err(e) }
}

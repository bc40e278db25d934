//! A runtime that runs nothing: for nodes without a container runtime
//! (tests, the demo, many nodes on one machine). Sandboxes and containers
//! are records; a container "runs" from its start until it is stopped
//! (then it exited with 0, or 137 when its grace period was zero, as a
//! killed process would), except one that runs to completion (an init
//! container), which exits with 0 as soon as it starts; every image is present, and its events are told
//! as a runtime tells them. The pods owner drives it exactly as it drives
//! a real one, so pods go through the same lifecycle and status writes.
//!
//! Made [`persistent`](SimulatedRuntime::persistent), it keeps its records
//! in a file, as a real runtime outlives the agent: an agent started again
//! finds its sandboxes and containers still "running". The file names the
//! boot it was written in; after a reboot its records are gone, as a real
//! runtime's containers are.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

use super::container_runtime::{
    ContainerRuntime, RuntimeCondition, RuntimeHandler, RuntimeStatus, RuntimeVersion,
};
use super::error::RuntimeError;
use super::spec::{
    CONTAINER_HASH_ANNOTATION, ContainerEvent, ContainerEventKind, ContainerSpec, ContainerState,
    ContainerStatus, PulledImage, SandboxSpec, SandboxStatus, container_hash_of,
};

/// The exit code of a process killed by SIGKILL.
const KILLED: i32 = 137;

/// A simulated runtime. Cheap to clone: clones share their sandboxes and
/// containers.
#[derive(Clone)]
pub struct SimulatedRuntime {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<ContainerEvent>,
    /// Where its records are kept, and the boot they belong to.
    file: Option<Arc<(PathBuf, String)>>,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, SandboxStatus>,
    containers: BTreeMap<String, ContainerStatus>,
    /// Containers that exit as soon as they start.
    completing: std::collections::BTreeSet<String>,
}

/// The records on disk.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    boot_id: String,
    state: State,
}

impl Default for SimulatedRuntime {
    fn default() -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            events: broadcast::channel(1024).0,
            file: None,
        }
    }
}

impl SimulatedRuntime {
    /// A runtime with nothing in it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A runtime keeping its records in `file`, for boot `boot_id`: the
    /// records found there are taken up when they are of the same boot
    /// (an unreadable file, or one of another boot, is started over).
    pub fn persistent(file: PathBuf, boot_id: &str) -> Self {
        let found = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Saved>(&bytes).ok())
            .filter(|saved| saved.boot_id == boot_id)
            .map(|saved| saved.state)
            .unwrap_or_default();
        Self {
            state: Arc::new(Mutex::new(found)),
            events: broadcast::channel(1024).0,
            file: Some(Arc::new((file, boot_id.to_string()))),
        }
    }

    /// Reads or changes the records; a change is saved when the runtime
    /// is persistent (a failed save is logged: the records in memory stay
    /// right).
    fn with_state<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let out = change(&mut state);
        if let Some(file) = &self.file {
            save(&file.0, &file.1, &state);
        }
        out
    }

    /// Reads the records.
    fn read_state<T>(&self, read: impl FnOnce(&State) -> T) -> T {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        read(&state)
    }

    fn tell(&self, container_id: &str, kind: ContainerEventKind, pod_uid: &str) {
        let _ = self.events.send(ContainerEvent {
            container_id: container_id.to_string(),
            kind,
            pod_uid: Some(pod_uid.to_string()),
        });
    }

    /// Ends container `id` as if its process exited with `code` (a test's
    /// crash, or a job's completion).
    pub fn exit(&self, id: &str, code: i32) -> Result<(), RuntimeError> {
        let uid = self.with_state(|state| {
            let container = state
                .containers
                .get_mut(id)
                .ok_or_else(|| not_found("container", id))?;
            if container.state == ContainerState::Running {
                container.state = ContainerState::Exited;
                container.finished_at = Some(SystemTime::now());
                container.exit_code = Some(code);
                container.reason = if code == 0 { "Completed" } else { "Error" }.into();
            }
            Ok::<_, RuntimeError>(container.pod.uid.clone())
        })?;
        self.tell(id, ContainerEventKind::Stopped, &uid);
        Ok(())
    }
}

/// Writes `state` to `file` whole (a new file renamed over the old).
fn save(file: &std::path::Path, boot_id: &str, state: &State) {
    #[derive(serde::Serialize)]
    struct SavedRef<'a> {
        boot_id: &'a str,
        state: &'a State,
    }
    let written = serde_json::to_vec(&SavedRef { boot_id, state })
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            let tmp = file.with_extension("tmp");
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, file)
        });
    if let Err(e) = written {
        tracing::warn!(file = %file.display(), error = %e, "cannot save the simulated runtime's records");
    }
}

fn not_found(what: &'static str, id: &str) -> RuntimeError {
    RuntimeError::NotFound {
        what,
        id: id.to_string(),
    }
}

#[async_trait::async_trait]
impl ContainerRuntime for SimulatedRuntime {
    async fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        Ok(RuntimeVersion {
            name: "simulated".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            api_version: "v1".into(),
        })
    }

    /// Ready, with its network, and one default handler: it runs nothing
    /// that could be not ready.
    async fn status(&self) -> Result<RuntimeStatus, RuntimeError> {
        let ready = |kind: &str| RuntimeCondition {
            kind: kind.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        Ok(RuntimeStatus {
            conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            handlers: vec![RuntimeHandler {
                name: String::new(),
                recursive_read_only_mounts: false,
                user_namespaces: false,
            }],
            supplemental_groups_policy: false,
        })
    }

    async fn image_present(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        Ok(Some(image.to_string()))
    }

    async fn pull_image(
        &self,
        image: &str,
        _sandbox: &SandboxSpec,
    ) -> Result<PulledImage, RuntimeError> {
        Ok(PulledImage {
            reference: image.to_string(),
            size: 0,
        })
    }

    async fn run_sandbox(&self, sandbox: &SandboxSpec) -> Result<String, RuntimeError> {
        Ok(self.with_state(|state| {
            state.next_id += 1;
            let id = format!("sandbox-{}", state.next_id);
            state.sandboxes.insert(
                id.clone(),
                SandboxStatus {
                    id: id.clone(),
                    pod: sandbox.pod.clone(),
                    attempt: sandbox.attempt,
                    ready: true,
                    created_at: SystemTime::now(),
                },
            );
            id
        }))
    }

    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let stopped: Vec<(String, String)> = self.with_state(|state| {
            let Some(sandbox) = state.sandboxes.get_mut(id) else {
                // Stopping is idempotent, a sandbox gone included.
                return Vec::new();
            };
            sandbox.ready = false;
            let mut stopped = Vec::new();
            for container in state.containers.values_mut() {
                if container.sandbox_id == id && container.state == ContainerState::Running {
                    container.state = ContainerState::Exited;
                    container.finished_at = Some(SystemTime::now());
                    container.exit_code = Some(KILLED);
                    container.reason = "Error".into();
                    stopped.push((container.id.clone(), container.pod.uid.clone()));
                }
            }
            stopped
        });
        for (container, uid) in stopped {
            self.tell(&container, ContainerEventKind::Stopped, &uid);
        }
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.stop_sandbox(id).await?;
        let removed: Vec<(String, String)> = self.with_state(|state| {
            state.sandboxes.remove(id);
            let ids: Vec<String> = state
                .containers
                .values()
                .filter(|c| c.sandbox_id == id)
                .map(|c| c.id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|c| state.containers.remove(&c))
                .map(|c| (c.id, c.pod.uid))
                .collect()
        });
        for (container, uid) in removed {
            self.tell(&container, ContainerEventKind::Deleted, &uid);
        }
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        sandbox: &SandboxSpec,
        container: &ContainerSpec,
        image_ref: &str,
    ) -> Result<String, RuntimeError> {
        let id = self.with_state(|state| {
            if !state.sandboxes.get(sandbox_id).is_some_and(|s| s.ready) {
                return Err(not_found("sandbox", sandbox_id));
            }
            state.next_id += 1;
            let id = format!("container-{}", state.next_id);
            state.containers.insert(
                id.clone(),
                ContainerStatus {
                    id: id.clone(),
                    sandbox_id: sandbox_id.to_string(),
                    pod: sandbox.pod.clone(),
                    name: container.name.clone(),
                    attempt: container.attempt,
                    state: ContainerState::Created,
                    image_ref: image_ref.to_string(),
                    image: container.image.clone(),
                    created_at: SystemTime::now(),
                    started_at: None,
                    finished_at: None,
                    exit_code: None,
                    reason: String::new(),
                    message: String::new(),
                    user: None,
                    log_path: String::new(),
                    hash: container_hash_of(container.annotations.get(CONTAINER_HASH_ANNOTATION)),
                },
            );
            Ok(id)
        })?;
        if container.runs_to_completion {
            self.with_state(|state| state.completing.insert(id.clone()));
        }
        self.tell(&id, ContainerEventKind::Created, &sandbox.pod.uid);
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let uid = self.with_state(|state| {
            let container = state
                .containers
                .get_mut(id)
                .ok_or_else(|| not_found("container", id))?;
            if container.state != ContainerState::Created {
                return Err(RuntimeError::Call {
                    operation: "StartContainer",
                    code: tonic::Code::FailedPrecondition,
                    message: format!("container {id} is not created"),
                });
            }
            container.state = ContainerState::Running;
            container.started_at = Some(SystemTime::now());
            Ok(container.pod.uid.clone())
        })?;
        self.tell(id, ContainerEventKind::Started, &uid);
        if self.with_state(|state| state.completing.remove(id)) {
            self.exit(id, 0)?;
        }
        Ok(())
    }

    async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let code = if grace.is_zero() { KILLED } else { 0 };
        let stopped = self.with_state(|state| {
            let container = state
                .containers
                .get_mut(id)
                .ok_or_else(|| not_found("container", id))?;
            if container.state != ContainerState::Running {
                return Ok(None);
            }
            container.state = ContainerState::Exited;
            container.finished_at = Some(SystemTime::now());
            container.exit_code = Some(code);
            container.reason = if code == 0 { "Completed" } else { "Error" }.into();
            Ok(Some(container.pod.uid.clone()))
        })?;
        if let Some(uid) = stopped {
            self.tell(id, ContainerEventKind::Stopped, &uid);
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let removed = self.with_state(|state| state.containers.remove(id));
        if let Some(container) = removed {
            self.tell(id, ContainerEventKind::Deleted, &container.pod.uid);
        }
        Ok(())
    }

    async fn sandboxes(&self) -> Result<Vec<SandboxStatus>, RuntimeError> {
        Ok(self.read_state(|state| state.sandboxes.values().cloned().collect()))
    }

    async fn containers(&self) -> Result<Vec<ContainerStatus>, RuntimeError> {
        Ok(self.read_state(|state| state.containers.values().cloned().collect()))
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus, RuntimeError> {
        self.read_state(|state| state.containers.get(id).cloned())
            .ok_or_else(|| not_found("container", id))
    }

    async fn container_events(
        &self,
    ) -> Result<BoxStream<'static, Result<ContainerEvent, RuntimeError>>, RuntimeError> {
        Ok(BroadcastStream::new(self.events.subscribe())
            // A reader that lags has lost events: it relists, as after any
            // break of the stream.
            .take_while(|event| std::future::ready(event.is_ok()))
            .filter_map(|event| std::future::ready(event.ok().map(Ok)))
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test with a precise location.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;
    use crate::runtime::{PodIdentity, PullPolicy};

    fn sandbox() -> SandboxSpec {
        SandboxSpec {
            pod: PodIdentity {
                namespace: "default".into(),
                name: "web".into(),
                uid: "u1".into(),
            },
            ..SandboxSpec::default()
        }
    }

    fn container(name: &str) -> ContainerSpec {
        ContainerSpec {
            name: name.into(),
            image: "busybox:1".into(),
            ..ContainerSpec::default()
        }
    }

    #[tokio::test]
    async fn a_container_runs_from_its_start_until_stopped_and_each_step_is_told() {
        let runtime = SimulatedRuntime::new();
        let mut events = runtime.container_events().await.unwrap();
        let sandbox = sandbox();
        let image = runtime
            .ensure_image("busybox:1", PullPolicy::Never, &sandbox)
            .await
            .unwrap();
        let sandbox_id = runtime.run_sandbox(&sandbox).await.unwrap();
        let id = runtime
            .create_container(&sandbox_id, &sandbox, &container("main"), &image)
            .await
            .unwrap();
        assert_eq!(
            runtime.container_status(&id).await.unwrap().state,
            ContainerState::Created
        );
        runtime.start_container(&id).await.unwrap();
        let running = runtime.container_status(&id).await.unwrap();
        assert_eq!(running.state, ContainerState::Running);
        assert_eq!(running.pod.uid, "u1");
        assert!(runtime.start_container(&id).await.is_err(), "started once");

        runtime
            .stop_container(&id, Duration::from_secs(30))
            .await
            .unwrap();
        let stopped = runtime.container_status(&id).await.unwrap();
        assert_eq!(
            (stopped.state, stopped.exit_code),
            (ContainerState::Exited, Some(0))
        );
        runtime.remove_sandbox(&sandbox_id).await.unwrap();
        assert!(runtime.containers().await.unwrap().is_empty());
        assert!(runtime.sandboxes().await.unwrap().is_empty());

        let mut kinds = Vec::new();
        for _ in 0..4 {
            let event = events.next().await.unwrap().unwrap();
            assert_eq!(
                (event.container_id.as_str(), event.pod_uid.as_deref()),
                (id.as_str(), Some("u1"))
            );
            kinds.push(event.kind);
        }
        assert_eq!(
            kinds,
            [
                ContainerEventKind::Created,
                ContainerEventKind::Started,
                ContainerEventKind::Stopped,
                ContainerEventKind::Deleted
            ]
        );
    }

    #[tokio::test]
    async fn a_stopped_sandbox_kills_its_containers_and_takes_no_more() {
        let runtime = SimulatedRuntime::new();
        let sandbox = sandbox();
        let sandbox_id = runtime.run_sandbox(&sandbox).await.unwrap();
        let id = runtime
            .create_container(&sandbox_id, &sandbox, &container("main"), "busybox:1")
            .await
            .unwrap();
        runtime.start_container(&id).await.unwrap();
        runtime.stop_sandbox(&sandbox_id).await.unwrap();
        let killed = runtime.container_status(&id).await.unwrap();
        assert_eq!(
            (killed.state, killed.exit_code),
            (ContainerState::Exited, Some(KILLED))
        );
        let refused = runtime
            .create_container(&sandbox_id, &sandbox, &container("late"), "busybox:1")
            .await
            .unwrap_err();
        assert!(refused.is_not_found(), "{refused}");
        runtime.exit(&id, 3).unwrap();
        assert_eq!(
            runtime.container_status(&id).await.unwrap().exit_code,
            Some(KILLED),
            "ended once"
        );
    }
}

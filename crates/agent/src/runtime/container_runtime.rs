//! The interface the pods owner drives a runtime through, whichever it
//! is.

use std::time::Duration;

use futures::stream::BoxStream;

use super::error::RuntimeError;
use super::security::ImageUser;
use super::spec::{
    ContainerEvent, ContainerSpec, ContainerStatus, PullPolicy, PulledImage, SandboxSpec,
    SandboxStatus,
};
use super::stats::{ContainerStats, SandboxStats};
use super::streaming::{AttachRequest, ExecRequest, ExecSyncOutput};

/// What a runtime says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// Its name (`containerd`).
    pub name: String,
    /// Its version.
    pub version: String,
    /// The CRI version it speaks (`v1`).
    pub api_version: String,
}

/// One of a runtime's conditions (`RuntimeReady`, `NetworkReady`), as its
/// status gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeCondition {
    /// The condition (`RuntimeReady`, `NetworkReady`).
    pub kind: String,
    /// Whether it holds.
    pub status: bool,
    /// Why not, in a word.
    pub reason: String,
    /// Why not, in a sentence.
    pub message: String,
}

/// A runtime handler and what it can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeHandler {
    /// Its name (empty: the default handler).
    pub name: String,
    /// Whether it mounts read-only volumes recursively read-only.
    pub recursive_read_only_mounts: bool,
    /// Whether it runs pods in user namespaces.
    pub user_namespaces: bool,
}

/// What a runtime says of its state (the CRI's `Status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStatus {
    /// Its conditions.
    pub conditions: Vec<RuntimeCondition>,
    /// Its handlers.
    pub handlers: Vec<RuntimeHandler>,
    /// Whether it honours a pod's `supplementalGroupsPolicy`.
    pub supplemental_groups_policy: bool,
}

impl RuntimeStatus {
    /// The condition `kind`, if the runtime gives it.
    pub fn condition(&self, kind: &str) -> Option<&RuntimeCondition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

/// A container runtime, as the pods owner uses it.
#[async_trait::async_trait]
pub trait ContainerRuntime: Send + Sync + 'static {
    /// Its name and versions.
    async fn version(&self) -> Result<RuntimeVersion, RuntimeError>;

    /// Its conditions, handlers and features.
    async fn status(&self) -> Result<RuntimeStatus, RuntimeError>;

    /// Whether its default handler can mount read-only volumes
    /// recursively read-only (its status's handler features; none says
    /// so: no).
    async fn supports_recursive_read_only(&self) -> Result<bool, RuntimeError> {
        Ok(self
            .status()
            .await?
            .handlers
            .iter()
            .find(|h| h.name.is_empty())
            .is_some_and(|h| h.recursive_read_only_mounts))
    }

    /// The reference of `image` when the node has it.
    async fn image_present(&self, image: &str) -> Result<Option<String>, RuntimeError>;

    /// Pulls `image` for a container of `sandbox`'s pod: its reference and
    /// size.
    async fn pull_image(
        &self,
        image: &str,
        sandbox: &SandboxSpec,
    ) -> Result<PulledImage, RuntimeError>;

    /// The reference of `image`, pulled first when `policy` says so (for a
    /// container of `sandbox`'s pod).
    async fn ensure_image(
        &self,
        image: &str,
        policy: PullPolicy,
        sandbox: &SandboxSpec,
    ) -> Result<String, RuntimeError> {
        if policy != PullPolicy::Always {
            match self.image_present(image).await? {
                Some(reference) => return Ok(reference),
                None if policy == PullPolicy::Never => {
                    return Err(RuntimeError::ImageNeverPulled {
                        image: image.to_string(),
                    });
                }
                None => {}
            }
        }
        Ok(self.pull_image(image, sandbox).await?.reference)
    }

    /// Who image `image` (present on the node) runs as, by its
    /// configuration; root when it names nobody (the kubelet's
    /// `getImageUser`). A runtime that runs nothing says root.
    async fn image_user(&self, image: &str) -> Result<ImageUser, RuntimeError> {
        let _ = image;
        Ok(ImageUser::default())
    }

    /// Makes the pod's sandbox; its id.
    async fn run_sandbox(&self, sandbox: &SandboxSpec) -> Result<String, RuntimeError>;

    /// Stops sandbox `id` and every container in it (idempotent).
    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError>;

    /// Removes sandbox `id` and its containers (idempotent).
    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError>;

    /// Makes `container` in sandbox `sandbox_id` (made with `sandbox`),
    /// running image `image_ref`; its id.
    async fn create_container(
        &self,
        sandbox_id: &str,
        sandbox: &SandboxSpec,
        container: &ContainerSpec,
        image_ref: &str,
    ) -> Result<String, RuntimeError>;

    /// Starts container `id`.
    async fn start_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// Stops container `id`: SIGTERM, then SIGKILL after `grace`.
    async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;

    /// Removes container `id` (idempotent).
    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// Every sandbox.
    async fn sandboxes(&self) -> Result<Vec<SandboxStatus>, RuntimeError>;

    /// Every container, without what only its status tells (times, exit
    /// codes).
    async fn containers(&self) -> Result<Vec<ContainerStatus>, RuntimeError>;

    /// Container `id` in full.
    async fn container_status(&self, id: &str) -> Result<ContainerStatus, RuntimeError>;

    /// The runtime's container events from now on. A runtime without them
    /// answers `Unimplemented`, and its containers are relisted instead;
    /// the stream ends when the runtime goes (relist, then ask again).
    async fn container_events(
        &self,
    ) -> Result<BoxStream<'static, Result<ContainerEvent, RuntimeError>>, RuntimeError>;

    /// A URL of the runtime's streaming server where `request` runs (CRI
    /// `Exec`). A runtime that runs no process answers `Unimplemented`.
    async fn exec(&self, request: &ExecRequest) -> Result<String, RuntimeError> {
        let _ = request;
        Err(unsupported("Exec"))
    }

    /// A URL of the runtime's streaming server attached to a container's
    /// process (CRI `Attach`).
    async fn attach(&self, request: &AttachRequest) -> Result<String, RuntimeError> {
        let _ = request;
        Err(unsupported("Attach"))
    }

    /// A URL of the runtime's streaming server forwarding to `ports` (none:
    /// whichever the session asks for) in sandbox `sandbox_id`'s network
    /// (CRI `PortForward`).
    async fn port_forward(&self, sandbox_id: &str, ports: &[i32]) -> Result<String, RuntimeError> {
        let _ = (sandbox_id, ports);
        Err(unsupported("PortForward"))
    }

    /// The usage of every container the runtime measures (CRI
    /// `ListContainerStats`). A runtime that runs nothing answers
    /// `Unimplemented`.
    async fn container_stats(&self) -> Result<Vec<ContainerStats>, RuntimeError> {
        Err(unsupported("ListContainerStats"))
    }

    /// The usage of every sandbox (CRI `ListPodSandboxStats`).
    async fn sandbox_stats(&self) -> Result<Vec<SandboxStats>, RuntimeError> {
        Err(unsupported("ListPodSandboxStats"))
    }

    /// Runs `cmd` in container `id` to its end, or until `timeout` (none:
    /// no limit of the command's own), and gives its output (CRI
    /// `ExecSync`).
    async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecSyncOutput, RuntimeError> {
        let _ = (id, cmd, timeout);
        Err(unsupported("ExecSync"))
    }
}

/// The answer of a runtime without processes to a call that needs one.
fn unsupported(operation: &'static str) -> RuntimeError {
    RuntimeError::Call {
        operation,
        code: tonic::Code::Unimplemented,
        message: "this runtime runs no processes".to_string(),
    }
}

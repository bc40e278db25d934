//! What the pods owner asks of a runtime and what a runtime reports, in
//! the runtime's own terms but none of its wire types: a pod's sandbox, a
//! container made with exactly what the kubelet hands a runtime (its
//! device plugins' device nodes, mounts, environment, annotations and the
//! CDI devices of its plugins and claims), and the state of each.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::runtime::security::{ContainerSecurity, SandboxSecurity};

/// A host path mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MountSpec {
    /// Path in the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// How mounts below it propagate.
    #[serde(default)]
    pub propagation: MountPropagation,
    /// The runtime relabels it for the container (SELinux).
    #[serde(default)]
    pub selinux_relabel: bool,
    /// Read-only all the way down: the mounts below it too (CRI's
    /// `recursive_read_only`; only with `read_only`).
    #[serde(default)]
    pub recursive_read_only: bool,
    /// An image mounted in place of a host path (an `image` volume; CRI's
    /// `image` and `image_sub_path`): `host_path` is then empty.
    #[serde(default)]
    pub image: Option<MountImage>,
}

/// The image an `image` volume mounts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MountImage {
    /// The image as pulled (its reference on the runtime).
    pub image: String,
    /// The image as the pod names it.
    pub user_specified_image: String,
    /// A path in the image to mount in its place (empty: its root).
    #[serde(default)]
    pub sub_path: String,
}

/// How mounts propagate between the host and a container's mount (CRI's
/// `MountPropagation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MountPropagation {
    /// None (rprivate).
    #[default]
    Private,
    /// The host's mounts below it reach the container (rslave).
    HostToContainer,
    /// Both ways (rshared; privileged containers only).
    Bidirectional,
}

/// A device node made available in the container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceNodeSpec {
    /// Path in the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// Cgroup permissions: any of `r`, `w`, `m`.
    pub permissions: String,
}

/// The kubelet's default `podLogsDir`: where a real runtime writes the
/// pods' container logs, one directory per pod.
pub const POD_LOGS_DIR: &str = "/var/log/pods";

/// The kubelet's label naming a sandbox's or container's pod.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// The kubelet's label naming a sandbox's or container's pod namespace.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// The kubelet's label naming a sandbox's or container's pod UID.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The kubelet's label naming a container.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// The pod a sandbox or container belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodIdentity {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// A pod's sandbox: its namespaces, shared by its containers. Only the
/// host's network is offered (no CNI): see the operator guide.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The pod.
    pub pod: PodIdentity,
    /// How many sandboxes the pod had before this one.
    pub attempt: u32,
    /// Where its containers' logs go (`/var/log/pods/<ns>_<name>_<uid>`
    /// for the kubelet).
    pub log_directory: String,
    /// Labels (the pod's, and the kubelet's `io.kubernetes.pod.*`).
    pub labels: BTreeMap<String, String>,
    /// Annotations (the pod's).
    pub annotations: BTreeMap<String, String>,
    /// Its DNS settings; none: the runtime's default.
    pub dns: Option<DnsSpec>,
    /// What it runs as and may do.
    pub security: SandboxSecurity,
    /// The runtime's handler it runs on, as its pod's RuntimeClass names
    /// it (empty: the runtime's default).
    pub runtime_handler: String,
}

/// A sandbox's DNS settings (its `/etc/resolv.conf`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsSpec {
    /// Name servers.
    pub servers: Vec<String>,
    /// Search domains.
    pub searches: Vec<String>,
    /// Resolver options.
    pub options: Vec<String>,
}

/// One container to create in a sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerSpec {
    /// Its name in the pod.
    pub name: String,
    /// How many times it was created before (its restart count).
    pub attempt: u32,
    /// The image, as the pod names it.
    pub image: String,
    /// The entrypoint (the image's when empty).
    pub command: Vec<String>,
    /// Its arguments (the image's when both are empty).
    pub args: Vec<String>,
    /// The working directory (the image's when empty).
    pub working_dir: String,
    /// Environment variables, in order; a later one of a name wins.
    pub envs: Vec<(String, String)>,
    /// Host paths mounted into it.
    pub mounts: Vec<MountSpec>,
    /// Device nodes made available in it.
    pub devices: Vec<DeviceNodeSpec>,
    /// Fully qualified CDI device names the runtime resolves from its spec
    /// files.
    pub cdi_devices: Vec<String>,
    /// Labels (the kubelet's `io.kubernetes.*`).
    pub labels: BTreeMap<String, String>,
    /// Annotations (the kubelet's and the device plugins').
    pub annotations: BTreeMap<String, String>,
    /// Its log file, relative to the sandbox's log directory.
    pub log_path: String,
    /// It is to run to completion (an init container that is not a
    /// sidecar). Not sent to a real runtime; the simulated one ends such a
    /// container with 0 as soon as it starts.
    pub runs_to_completion: bool,
    /// Its cgroup resources.
    pub resources: LinuxResources,
    /// Its standard input is kept open for `attach` (`stdin`).
    pub stdin: bool,
    /// Its standard input is closed after the first attach ends
    /// (`stdinOnce`).
    pub stdin_once: bool,
    /// It runs on a terminal (`tty`).
    pub tty: bool,
    /// What it runs as and may do.
    pub security: ContainerSecurity,
}

/// A container's cgroup resources (CRI `LinuxContainerResources`), as the
/// kubelet computes them from its requests and limits and the pod's QoS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinuxResources {
    /// CFS period in microseconds (0: the runtime's default).
    pub cpu_period: i64,
    /// CFS quota in microseconds per period (0: none).
    pub cpu_quota: i64,
    /// Relative CPU weight (cgroup v1 shares).
    pub cpu_shares: i64,
    /// Memory limit in bytes (0: none).
    pub memory_limit_in_bytes: i64,
    /// The OOM killer's adjustment for its processes.
    pub oom_score_adj: i64,
    /// Memory plus swap limit in bytes (0: none).
    pub memory_swap_limit_in_bytes: i64,
    /// Huge page limits: page size (`2MB`, `1GB`) and bytes.
    pub hugepage_limits: Vec<(String, u64)>,
    /// cgroup v2 files and values (`memory.oom.group`...).
    pub unified: BTreeMap<String, String>,
}

/// Where a container is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerState {
    /// Made, not started.
    Created,
    /// Its process runs.
    Running,
    /// Its process ended.
    Exited,
    /// The runtime cannot tell.
    Unknown,
}

/// A sandbox as the runtime has it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxStatus {
    /// The runtime's id.
    pub id: String,
    /// The pod it is for (from its labels and metadata).
    pub pod: PodIdentity,
    /// Its attempt.
    pub attempt: u32,
    /// Whether it is ready (not stopped).
    pub ready: bool,
    /// When it was made.
    pub created_at: SystemTime,
}

/// A container as the runtime has it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerStatus {
    /// The runtime's id.
    pub id: String,
    /// Its sandbox's id.
    pub sandbox_id: String,
    /// The pod it is for.
    pub pod: PodIdentity,
    /// Its name in the pod.
    pub name: String,
    /// Its attempt (restart count).
    pub attempt: u32,
    /// Where it is.
    pub state: ContainerState,
    /// The image reference it runs.
    pub image_ref: String,
    /// The image it runs, as the runtime names it (`docker.io/library/busybox:1.36`
    /// for `busybox:1.36`; empty when not told).
    #[serde(default)]
    pub image: String,
    /// When it was made.
    pub created_at: SystemTime,
    /// When it started, once it did.
    pub started_at: Option<SystemTime>,
    /// When it ended, once it did.
    pub finished_at: Option<SystemTime>,
    /// Its exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Why it is in its state (`Completed`, `Error`, `OOMKilled`...).
    pub reason: String,
    /// More about it.
    pub message: String,
    /// Who its process runs as, when the runtime tells it.
    #[serde(default)]
    pub user: Option<ContainerUser>,
    /// Its log file, as its status names it (empty: not told, as in a
    /// listing).
    #[serde(default)]
    pub log_path: String,
    /// The hash of the container spec it was made from, as the kubelet
    /// writes it in its `io.kubernetes.container.hash` annotation (`None`:
    /// no such annotation): a spec whose hash differs asks for another
    /// container.
    #[serde(default)]
    pub hash: Option<u64>,
}

/// The annotation a container's spec hash is kept in.
pub(crate) const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";

/// The spec hash of a container whose [`CONTAINER_HASH_ANNOTATION`] is
/// `annotation` (hexadecimal, as the kubelet writes and reads it).
pub(crate) fn container_hash_of(annotation: Option<&String>) -> Option<u64> {
    annotation.and_then(|h| u64::from_str_radix(h, 16).ok())
}

/// Who a container's process runs as.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerUser {
    /// Its user id.
    pub uid: i64,
    /// Its group id.
    pub gid: i64,
    /// Its supplemental groups.
    pub supplemental_groups: Vec<i64>,
}

/// What happened to a container, as the runtime tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerEventKind {
    /// It was made.
    Created,
    /// It started.
    Started,
    /// It stopped.
    Stopped,
    /// It was removed.
    Deleted,
}

/// One event of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    /// The container's id.
    pub container_id: String,
    /// What happened.
    pub kind: ContainerEventKind,
    /// Its pod's UID, when the runtime said.
    pub pod_uid: Option<String>,
}

/// An image the runtime pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledImage {
    /// Its reference (an image id).
    pub reference: String,
    /// Its size in bytes, as the runtime tells it.
    pub size: u64,
}

/// When an image is pulled, as the pod's `imagePullPolicy` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Pulled every time a container starts.
    Always,
    /// Pulled when the runtime does not have it.
    #[default]
    IfNotPresent,
    /// Never pulled: a container whose image is absent cannot start.
    Never,
}

impl PullPolicy {
    /// The pod's policy, with the API's default (`Always` for `:latest`
    /// or untagged images, else `IfNotPresent`).
    pub fn of(policy: Option<&str>, image: &str) -> Self {
        match policy {
            Some("Always") => Self::Always,
            Some("Never") => Self::Never,
            Some("IfNotPresent") => Self::IfNotPresent,
            _ => {
                let name = image.rsplit('/').next().unwrap_or(image);
                let untagged = !name.contains(':') && !image.contains('@');
                if untagged || image.ends_with(":latest") {
                    Self::Always
                } else {
                    Self::IfNotPresent
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pull_policy_defaults_as_the_api_server_defaults_it() {
        assert_eq!(PullPolicy::of(None, "busybox"), PullPolicy::Always);
        assert_eq!(PullPolicy::of(None, "busybox:latest"), PullPolicy::Always);
        assert_eq!(
            PullPolicy::of(None, "registry:5000/busybox"),
            PullPolicy::Always
        );
        assert_eq!(
            PullPolicy::of(None, "registry:5000/busybox:1"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            PullPolicy::of(None, "busybox@sha256:00"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(PullPolicy::of(Some("Never"), "busybox"), PullPolicy::Never);
    }
}

//! What a container is given, assembled in one place, as the kubelet's
//! `GenerateRunContainerOptions` assembles its run options: from what
//! admission gave it (its device plugins' environment, mounts, device
//! nodes, annotations and CDI devices; its claims' CDI devices) and what
//! the node adds (the Services' variables, the files the node makes for the
//! pod), into the runtime's own vocabulary; then made into the container's
//! spec (`runtime_spec`). Nothing else adds to a container.
//!
//! Mounts come in the kubelet's order: the device plugins', then the
//! container's volumes (`volumeMounts`, in its order), then the pod's files
//! (its hosts file, unless a volume is mounted at `/etc/hosts`; the
//! container's termination log).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pods::admit::container::ContainerResources;
use crate::pods::run_options::env::{EnvInputs, container_env};
use crate::pods::run_options::env_sources::EnvObjects;
use crate::pods::run_options::options::RunContainerOptions;
use crate::pods::run_options::pod_files::{ETC_HOSTS, PodFiles};
use crate::pods::run_options::runtime_spec::container_spec;
use crate::pods::run_options::security_context::container_security;
use crate::runtime::{ContainerSpec, ImageUser};
use crate::volumes::{MountError, MountSources, PodVolumes, container_mounts};

/// What the node adds to every container of one pod, gathered before its
/// containers are made.
pub(crate) struct NodeGiven<'a> {
    /// The Services' variables (`service_env`).
    pub(crate) service_env: &'a [(String, String)],
    /// The pod's directory of files, when the node keeps one.
    pub(crate) pod_files: Option<&'a PodFiles>,
    /// The pod's volumes as the volume manager set them up, when it has
    /// one, and the pod's directory of them (`pods/<uid>`).
    pub(crate) volumes: Option<(&'a PodVolumes, &'a Path)>,
    /// Whether the runtime makes mounts read-only all the way down.
    pub(crate) recursive_read_only: bool,
    /// The images of the pod's `image` volumes the container mounts, as
    /// pulled for it, by volume.
    pub(crate) images: &'a BTreeMap<String, String>,
    /// The ConfigMaps and Secrets the container's environment names.
    pub(crate) env_objects: &'a EnvObjects,
    /// The node's allocatable resources (a limit a container does not
    /// set, for its `resourceFieldRef` variables).
    pub(crate) allocatable: &'a BTreeMap<String, String>,
    /// Who the container's image runs as.
    pub(crate) image_user: &'a ImageUser,
    /// Where the node's seccomp profiles are (`<root>/seccomp`).
    pub(crate) seccomp_root: &'a Path,
    /// The node's address, the pod's too (`status.hostIP`, `status.podIP`).
    pub(crate) node_ip: Option<&'a str>,
}

/// Why a container's run options could not be made (the kubelet's
/// `CreateContainerConfigError`).
#[derive(Debug)]
pub(crate) enum RunOptionsError {
    /// The pod's files could not be made.
    PodFiles(std::io::Error),
    /// A volume mount could not be made.
    Mounts(MountError),
    /// The environment could not be made: the kubelet's message.
    Env(String),
    /// The security context refuses the container, or names what cannot
    /// be: the kubelet's message.
    Security(String),
}

impl fmt::Display for RunOptionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PodFiles(e) => write!(f, "cannot make the container's files: {e}"),
            Self::Env(message) | Self::Security(message) => f.write_str(message),
            Self::Mounts(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RunOptionsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::PodFiles(e) => Some(e),
            Self::Mounts(e) => Some(e),
            Self::Env(_) | Self::Security(_) => None,
        }
    }
}

/// Container `container` of `pod`, its `attempt`th creation, as the
/// runtime is asked for it: what admission gave it (`admitted`) and what
/// the node adds (`node`), assembled, then made into its spec.
pub(crate) fn run_container_spec(
    pod: &Pod,
    container: &Container,
    admitted: &ContainerResources,
    node: &NodeGiven<'_>,
    attempt: u32,
) -> Result<ContainerSpec, RunOptionsError> {
    let options = run_options(pod, container, admitted, node)?;
    let security = container_security(pod, container, node.image_user, node.seccomp_root)
        .map_err(RunOptionsError::Security)?;
    Ok(container_spec(pod, container, options, security, attempt))
}

/// The run options of `container` (its files made now).
pub(crate) fn run_options(
    pod: &Pod,
    container: &Container,
    admitted: &ContainerResources,
    node: &NodeGiven<'_>,
) -> Result<RunContainerOptions, RunOptionsError> {
    let inputs = EnvInputs {
        plugins: &admitted.envs,
        services: node.service_env,
        objects: node.env_objects,
        allocatable: node.allocatable,
        node_ip: node.node_ip,
        volumes: node.volumes.map(|(volumes, _)| volumes),
    };
    let envs = container_env(pod, container, &inputs).map_err(RunOptionsError::Env)?;
    let mut mounts = admitted.mounts.clone();
    if let Some((volumes, pod_dir)) = node.volumes {
        let sources = MountSources {
            volumes,
            pod_dir,
            recursive_supported: node.recursive_read_only,
            images: node.images,
        };
        mounts
            .extend(container_mounts(container, &sources, &envs).map_err(RunOptionsError::Mounts)?);
    }
    let hosts_mounted = container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == ETC_HOSTS);
    if let Some(files) = node.pod_files {
        let files = files
            .mounts(
                &container.name,
                container.termination_message_path.as_deref(),
            )
            .map_err(RunOptionsError::PodFiles)?;
        mounts.extend(
            files
                .into_iter()
                .filter(|m| !(hosts_mounted && m.container_path == ETC_HOSTS)),
        );
    }
    let mut cdi_devices = admitted.claim_cdi_devices.clone();
    for name in &admitted.cdi_devices {
        if !cdi_devices.contains(name) {
            cdi_devices.push(name.clone());
        }
    }
    Ok(RunContainerOptions {
        envs,
        mounts,
        devices: admitted.device_specs.clone(),
        cdi_devices,
        annotations: admitted.annotations.clone(),
    })
}

#[cfg(test)]
mod tests;

//! What the runtime is asked for one of the node's pods, made as the
//! kubelet v1.37 makes it (`generatePodSandboxConfig`,
//! `generateContainerConfig`):
//!
//! - **the sandbox**: the pod's metadata, its log directory
//!   `<pod logs>/<namespace>_<name>_<uid>`, the pod's labels with the
//!   kubelet's three `io.kubernetes.pod.*` over them, the pod's
//!   annotations;
//! - **a container**: its name and attempt (its restart count), image,
//!   command and arguments with `$(VAR)` expanded, working directory; its
//!   environment (the device plugins' first, then its own: a runtime keeps
//!   the last of a name, so its own win, as with the kubelet); the device
//!   plugins' mounts and device nodes; CDI devices, the claims' first, then
//!   the device plugins'; the kubelet's four labels; annotations, the device
//!   plugins' first and the kubelet's own over them (`container.hash`,
//!   `restartCount`, `terminationMessagePath`, `terminationMessagePolicy`,
//!   `pod.terminationGracePeriod`, `pod.deletionGracePeriod`, `ports`,
//!   `preStopHandler`); its log file `<name>/<restart count>.log`.
//!
//! What the container is given (environment, mounts, device nodes, CDI
//! devices, the plugins' annotations) comes assembled in one place
//! (`generate`); the cgroup resources from `linux_resources`; the
//! security context from `security_context`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pods::run_options::expand::expand;
use crate::pods::run_options::linux_resources::{Host, container_resources};
use crate::pods::run_options::options::RunContainerOptions;
use crate::pods::run_options::security_context::sandbox_security;
use crate::runtime::{
    CONTAINER_NAME_LABEL, ContainerSecurity, ContainerSpec, POD_NAME_LABEL, POD_NAMESPACE_LABEL,
    POD_UID_LABEL, PodIdentity, SandboxSpec,
};

/// The pod's sandbox, its `attempt`th, with its logs under `pod_logs`.
pub(crate) fn sandbox_spec(pod: &Pod, attempt: u32, pod_logs: &str) -> SandboxSpec {
    let identity = identity(pod);
    let mut labels: BTreeMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(POD_NAME_LABEL.into(), identity.name.clone());
    labels.insert(POD_NAMESPACE_LABEL.into(), identity.namespace.clone());
    labels.insert(POD_UID_LABEL.into(), identity.uid.clone());
    SandboxSpec {
        log_directory: format!(
            "{pod_logs}/{}_{}_{}",
            identity.namespace, identity.name, identity.uid
        ),
        labels,
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        attempt,
        pod: identity,
        dns: None,
        // Set from the pod's RuntimeClass when the sandbox is made.
        runtime_handler: String::new(),
        security: sandbox_security(pod),
    }
}

/// Container `container` of `pod`, its `restart_count`th creation, made
/// from what it is given (`options`), as the kubelet's
/// `generateContainerConfig` makes it from its run options: the command
/// and arguments expanded against its environment, the kubelet's labels,
/// its annotations under the kubelet's own, its log file and its cgroup
/// resources.
pub(crate) fn container_spec(
    pod: &Pod,
    container: &Container,
    options: RunContainerOptions,
    security: ContainerSecurity,
    restart_count: u32,
) -> ContainerSpec {
    let identity = identity(pod);
    let RunContainerOptions {
        envs,
        mounts,
        devices,
        cdi_devices,
        mut annotations,
    } = options;
    let vars: BTreeMap<&str, &str> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let expand_all = |words: &Option<Vec<String>>| -> Vec<String> {
        words
            .iter()
            .flatten()
            .map(|w| expand(w, |name| vars.get(name).map(|v| v.to_string())))
            .collect()
    };
    let command = expand_all(&container.command);
    let args = expand_all(&container.args);

    let mut labels = BTreeMap::new();
    labels.insert(POD_NAME_LABEL.to_string(), identity.name.clone());
    labels.insert(POD_NAMESPACE_LABEL.to_string(), identity.namespace.clone());
    labels.insert(POD_UID_LABEL.to_string(), identity.uid.clone());
    labels.insert(CONTAINER_NAME_LABEL.to_string(), container.name.clone());

    let spec = pod.spec.as_ref();
    annotations.insert(
        crate::runtime::CONTAINER_HASH_ANNOTATION.into(),
        format!("{:x}", container_hash(container)),
    );
    annotations.insert(
        "io.kubernetes.container.restartCount".into(),
        restart_count.to_string(),
    );
    annotations.insert(
        "io.kubernetes.container.terminationMessagePath".into(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    annotations.insert(
        "io.kubernetes.container.terminationMessagePolicy".into(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
        annotations.insert(
            "io.kubernetes.pod.deletionGracePeriod".into(),
            grace.to_string(),
        );
    }
    let grace = spec
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    annotations.insert(
        "io.kubernetes.pod.terminationGracePeriod".into(),
        grace.to_string(),
    );
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        && let Ok(json) = serde_json::to_string(pre_stop)
    {
        annotations.insert("io.kubernetes.container.preStopHandler".into(), json);
    }
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty())
        && let Ok(json) = serde_json::to_string(ports)
    {
        annotations.insert("io.kubernetes.container.ports".into(), json);
    }

    ContainerSpec {
        name: container.name.clone(),
        attempt: restart_count,
        image: container.image.clone().unwrap_or_default(),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs,
        mounts,
        devices,
        cdi_devices,
        labels,
        annotations,
        log_path: format!("{}/{restart_count}.log", container.name),
        runs_to_completion: runs_to_completion(pod, &container.name),
        resources: container_resources(pod, container, Host::this_machine()),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        security,
    }
}

/// Whether container `name` of `pod` is an init container that runs to
/// completion (not a sidecar).
fn runs_to_completion(pod: &Pod, name: &str) -> bool {
    crate::pods::admit::spec::containers(pod)
        .iter()
        .any(|(c, kind)| {
            c.name == name && *kind == crate::pods::admit::container::ContainerKind::Init
        })
}

/// The pod's namespace, name and UID.
fn identity(pod: &Pod) -> PodIdentity {
    PodIdentity {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// The kubelet's `io.kubernetes.container.hash` (`HashContainer`): FNV-32a
/// of its hash printer's rendering of the JSON `{"image":..,"name":..}` as
/// bytes, `([]uint8)[123 34 ...]`. (Go's JSON escapes `<`, `>` and `&`,
/// which no image or container name holds.)
pub(crate) fn container_hash(container: &Container) -> u32 {
    let quote = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let json = format!(
        "{{\"image\":{},\"name\":{}}}",
        quote(container.image.as_deref().unwrap_or_default()),
        quote(&container.name)
    );
    let bytes: Vec<String> = json.bytes().map(|b| b.to_string()).collect();
    let rendered = format!("([]uint8)[{}]", bytes.join(" "));
    let mut hash: u32 = 0x811c_9dc5;
    for byte in rendered.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

#[cfg(test)]
pub(in crate::pods) mod tests;

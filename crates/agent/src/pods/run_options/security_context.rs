//! A pod's and a container's security context as the kubelet hands it to
//! the runtime (`determineEffectiveSecurityContext`,
//! `generatePodSandboxLinuxConfig`, `verifyRunAsNonRoot`):
//!
//! - **the container's effective context**: the pod's `runAsUser`,
//!   `runAsGroup`, `runAsNonRoot` and SELinux options, each replaced by the
//!   container's own when it sets it; capabilities, `privileged`,
//!   `readOnlyRootFilesystem`, `allowPrivilegeEscalation` (false: no new
//!   privileges) and `procMount` are the container's alone;
//! - **its user**: the effective `runAsUser`, else the image's user (by id,
//!   or by name for the runtime to look up); `runAsNonRoot` refuses a
//!   container that would run as root, or whose image names its user only
//!   by name, with the kubelet's messages;
//! - **its groups**: the pod's `fsGroup`, then its `supplementalGroups`,
//!   under its `supplementalGroupsPolicy`;
//! - **its profiles**: seccomp from the container's field, else the pod's,
//!   else unconfined (the kubelet's default with `seccompDefault` off); a
//!   `Localhost` profile is a file under `<root>/seccomp`; AppArmor from the
//!   container's field, else the pod's deprecated per-container
//!   annotation, else the pod's field, else none (the runtime's default);
//! - **what of `/proc` and `/sys` it may see**: the default masked and
//!   read-only paths, none with `procMount: Unmasked`;
//! - **the namespaces**: the node's network (see the operator guide), the
//!   node's PIDs with `hostPID`, the pod's with `shareProcessNamespace`,
//!   else the container's own; the node's IPC with `hostIPC`, else the
//!   pod's;
//! - **the sandbox**: the pod's user, group and groups, privileged when any
//!   container is, seccomp `RuntimeDefault` whatever the pod says (the
//!   kubelet's fix for kubernetes/kubernetes#84623), the pod's sysctls.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, PodSecurityContext, SELinuxOptions, SeccompProfile,
    SecurityContext,
};

use crate::pods::admit::spec::containers;
use crate::runtime::{
    Capabilities, ContainerSecurity, ImageUser, NamespaceMode, Namespaces, SandboxSecurity,
    SeLinuxLabel, SecurityProfile, SupplementalGroupsPolicy,
};

/// The deprecated per-container AppArmor annotation's prefix.
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The paths masked in a container with the default `/proc` mount.
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths read-only in such a container.
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The pod's and the container's settings, merged as the kubelet's
/// `DetermineEffectiveSecurityContext` merges them.
#[derive(Debug, Default)]
struct Effective {
    selinux: Option<SELinuxOptions>,
    capabilities: Option<Capabilities>,
    privileged: Option<bool>,
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    run_as_non_root: Option<bool>,
    read_only_root: Option<bool>,
    allow_privilege_escalation: Option<bool>,
    unmasked_proc: bool,
}

impl Effective {
    fn of(pod: &Pod, container: &Container) -> Self {
        let pod_context = pod_context(pod);
        let own = container.security_context.as_ref();
        let pick = |mine: Option<i64>, pods: Option<i64>| mine.or(pods);
        Self {
            selinux: own
                .and_then(|c| c.se_linux_options.clone())
                .or_else(|| pod_context.and_then(|p| p.se_linux_options.clone())),
            capabilities: own
                .and_then(|c| c.capabilities.as_ref())
                .map(|c| Capabilities {
                    add: c.add.clone().unwrap_or_default(),
                    drop: c.drop.clone().unwrap_or_default(),
                }),
            privileged: own.and_then(|c| c.privileged),
            run_as_user: pick(
                own.and_then(|c| c.run_as_user),
                pod_context.and_then(|p| p.run_as_user),
            ),
            run_as_group: pick(
                own.and_then(|c| c.run_as_group),
                pod_context.and_then(|p| p.run_as_group),
            ),
            run_as_non_root: own
                .and_then(|c| c.run_as_non_root)
                .or_else(|| pod_context.and_then(|p| p.run_as_non_root)),
            read_only_root: own.and_then(|c| c.read_only_root_filesystem),
            allow_privilege_escalation: own.and_then(|c| c.allow_privilege_escalation),
            unmasked_proc: own.and_then(|c| c.proc_mount.as_deref()) == Some("Unmasked"),
        }
    }
}

fn pod_context(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref()?.security_context.as_ref()
}

/// The namespaces of `pod`'s sandbox and containers.
pub(crate) fn namespaces(pod: &Pod) -> Namespaces {
    let spec = pod.spec.as_ref();
    let flag = |get: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(get).unwrap_or(false)
    };
    Namespaces {
        // Every pod has the node's network here (no CNI).
        network: NamespaceMode::Node,
        pid: if flag(|s| s.host_pid) {
            NamespaceMode::Node
        } else if flag(|s| s.share_process_namespace) {
            NamespaceMode::Pod
        } else {
            NamespaceMode::Container
        },
        ipc: if flag(|s| s.host_ipc) {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        },
    }
}

/// What `pod`'s sandbox runs as and may do.
pub(crate) fn sandbox_security(pod: &Pod) -> SandboxSecurity {
    let context = pod_context(pod);
    let privileged = containers(pod).iter().any(|(c, _)| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    });
    let sysctls: BTreeMap<String, String> = context
        .and_then(|c| c.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    SandboxSecurity {
        namespaces: namespaces(pod),
        run_as_user: context.and_then(|c| c.run_as_user),
        run_as_group: context.and_then(|c| c.run_as_group),
        supplemental_groups: pod_groups(context),
        // An unknown policy fails each container's configuration.
        supplemental_groups_policy: groups_policy(context).unwrap_or_default(),
        privileged,
        seccomp: SecurityProfile::RuntimeDefault,
        selinux: context.and_then(|c| c.se_linux_options.as_ref()).map(label),
        sysctls,
    }
}

/// What `container` of `pod` runs as and may do, its image running as
/// `image_user`; a `Localhost` seccomp profile is found under
/// `seccomp_root`. A refusal is the kubelet's message (the container is
/// held with `CreateContainerConfigError`).
pub(crate) fn container_security(
    pod: &Pod,
    container: &Container,
    image_user: &ImageUser,
    seccomp_root: &Path,
) -> Result<ContainerSecurity, String> {
    let effective = Effective::of(pod, container);
    verify_run_as_non_root(pod, container, &effective, image_user)?;
    let context = pod_context(pod);
    let own = container.security_context.as_ref();
    let (run_as_user, run_as_username) = match (effective.run_as_user, image_user) {
        (Some(uid), _) => (Some(uid), String::new()),
        (None, ImageUser::Id(uid)) => (Some(*uid), String::new()),
        (None, ImageUser::Name(name)) => (None, name.clone()),
    };
    let (masked_paths, readonly_paths) = if effective.unmasked_proc {
        (Vec::new(), Vec::new())
    } else {
        (masked_paths(), owned(READONLY_PATHS))
    };
    Ok(ContainerSecurity {
        namespaces: namespaces(pod),
        capabilities: effective.capabilities,
        privileged: effective.privileged.unwrap_or(false),
        run_as_user,
        run_as_username,
        run_as_group: effective.run_as_group,
        supplemental_groups: pod_groups(context),
        supplemental_groups_policy: groups_policy(context)?,
        readonly_rootfs: effective.read_only_root.unwrap_or(false),
        no_new_privs: effective.allow_privilege_escalation == Some(false),
        seccomp: seccomp(own, context, seccomp_root)?,
        apparmor: apparmor(pod, container, own, context)?,
        selinux: effective.selinux.as_ref().map(label),
        masked_paths,
        readonly_paths,
    })
}

/// The kubelet's `verifyRunAsNonRoot`: with `runAsNonRoot`, a container
/// whose user is root, or cannot be known to be another, is refused.
fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    effective: &Effective,
    image_user: &ImageUser,
) -> Result<(), String> {
    if effective.run_as_non_root != Some(true) {
        return Ok(());
    }
    let pod_name = crate::common::go_quote::go_quote(&format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    ));
    let name = &container.name;
    if let Some(uid) = effective.run_as_user {
        return if uid == 0 {
            Err(format!(
                "container's runAsUser breaks non-root policy (pod: {pod_name}, container: {name})"
            ))
        } else {
            Ok(())
        };
    }
    match image_user {
        ImageUser::Name(user) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod_name}, container: {name})"
        )),
        ImageUser::Id(0) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod_name}, container: {name})"
        )),
        ImageUser::Id(uid) if *uid < 0 || *uid > i64::from(i32::MAX) => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({max})): must be between 0 and {max}, inclusive (pod: {pod_name}, container: {name})",
            max = i32::MAX
        )),
        ImageUser::Id(_) => Ok(()),
    }
}

/// The pod's `fsGroup`, then its `supplementalGroups`.
fn pod_groups(context: Option<&PodSecurityContext>) -> Vec<i64> {
    let Some(context) = context else {
        return Vec::new();
    };
    context
        .fs_group
        .into_iter()
        .chain(context.supplemental_groups.iter().flatten().copied())
        .collect()
}

/// The pod's `supplementalGroupsPolicy` (`Merge` when it names none).
fn groups_policy(context: Option<&PodSecurityContext>) -> Result<SupplementalGroupsPolicy, String> {
    match context.and_then(|c| c.supplemental_groups_policy.as_deref()) {
        None | Some("Merge") => Ok(SupplementalGroupsPolicy::Merge),
        Some("Strict") => Ok(SupplementalGroupsPolicy::Strict),
        Some(other) => Err(format!("unsupported supplementalGroupsPolicy: {other}")),
    }
}

/// The container's seccomp profile, else the pod's, else none.
fn seccomp(
    own: Option<&SecurityContext>,
    context: Option<&PodSecurityContext>,
    root: &Path,
) -> Result<SecurityProfile, String> {
    let field: Option<&SeccompProfile> = own
        .and_then(|c| c.seccomp_profile.as_ref())
        .or_else(|| context.and_then(|p| p.seccomp_profile.as_ref()));
    let Some(field) = field else {
        return Ok(SecurityProfile::Unconfined);
    };
    match field.type_.as_str() {
        "RuntimeDefault" => Ok(SecurityProfile::RuntimeDefault),
        "Localhost" => match field.localhost_profile.as_deref() {
            Some(file) if !file.is_empty() => Ok(SecurityProfile::Localhost(
                root.join(file).display().to_string(),
            )),
            _ => Err("localhostProfile must be set if seccompProfile type is Localhost.".into()),
        },
        _ => Ok(SecurityProfile::Unconfined),
    }
}

/// The container's AppArmor profile, else its annotation's, else the
/// pod's, else none.
fn apparmor(
    pod: &Pod,
    container: &Container,
    own: Option<&SecurityContext>,
    context: Option<&PodSecurityContext>,
) -> Result<Option<SecurityProfile>, String> {
    let from_field = |profile: &AppArmorProfile| match profile.type_.as_str() {
        "RuntimeDefault" => Ok(SecurityProfile::RuntimeDefault),
        "Unconfined" => Ok(SecurityProfile::Unconfined),
        "Localhost" => profile
            .localhost_profile
            .clone()
            .map(SecurityProfile::Localhost)
            .ok_or_else(|| "missing localhost apparmor profile name".to_string()),
        other => Err(format!("unknown apparmor profile type: {other:?}")),
    };
    if let Some(profile) = own.and_then(|c| c.app_armor_profile.as_ref()) {
        return from_field(profile).map(Some);
    }
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", container.name)));
    if let Some(value) = annotation {
        match value.as_str() {
            "runtime/default" => return Ok(Some(SecurityProfile::RuntimeDefault)),
            "unconfined" => return Ok(Some(SecurityProfile::Unconfined)),
            other => {
                if let Some(name) = other.strip_prefix("localhost/") {
                    return Ok(Some(SecurityProfile::Localhost(name.to_string())));
                }
                // An annotation of no known form counts as none.
            }
        }
    }
    match context.and_then(|p| p.app_armor_profile.as_ref()) {
        Some(profile) => from_field(profile).map(Some),
        None => Ok(None),
    }
}

fn label(options: &SELinuxOptions) -> SeLinuxLabel {
    SeLinuxLabel {
        user: options.user.clone().unwrap_or_default(),
        role: options.role.clone().unwrap_or_default(),
        kind: options.type_.clone().unwrap_or_default(),
        level: options.level.clone().unwrap_or_default(),
    }
}

/// The masked paths, with each CPU's `thermal_throttle` directory that
/// exists on the node, as the kubelet adds them.
fn masked_paths() -> Vec<String> {
    let mut paths = owned(MASKED_PATHS);
    if let Ok(cpus) = std::fs::read_dir("/sys/devices/system/cpu") {
        let mut throttles: Vec<(u32, String)> = cpus
            .flatten()
            .filter_map(|cpu| {
                let name = cpu.file_name();
                let index: u32 = name.to_str()?.strip_prefix("cpu")?.parse().ok()?;
                let path = cpu.path().join("thermal_throttle");
                path.exists().then(|| (index, path.display().to_string()))
            })
            .collect();
        throttles.sort();
        paths.extend(throttles.into_iter().map(|(_, path)| path));
    }
    paths
}

fn owned(paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

#[cfg(test)]
mod tests;

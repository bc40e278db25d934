//! How a sandbox and its containers are confined, in the runtime's terms
//! (CRI's `LinuxSandboxSecurityContext` and `LinuxContainerSecurityContext`)
//! but none of its wire types: the user and groups a process runs as,
//! its privileges and capabilities, its seccomp and AppArmor profiles, the
//! namespaces it shares with the node or the pod, the `/proc` and `/sys`
//! paths it may not see or write.

use std::collections::BTreeMap;

/// Whose namespace a sandbox or container uses (CRI `NamespaceMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NamespaceMode {
    /// One of the pod's own, shared by its containers.
    #[default]
    Pod,
    /// One of the container's own.
    Container,
    /// The node's.
    Node,
}

/// The namespaces of a pod's sandbox and containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces {
    /// The network namespace.
    pub network: NamespaceMode,
    /// The PID namespace.
    pub pid: NamespaceMode,
    /// The IPC namespace.
    pub ipc: NamespaceMode,
}

impl Default for Namespaces {
    /// A host-network pod's: the node's network, each container's PIDs,
    /// the pod's IPC.
    fn default() -> Self {
        Self {
            network: NamespaceMode::Node,
            pid: NamespaceMode::Container,
            ipc: NamespaceMode::Pod,
        }
    }
}

/// A seccomp or AppArmor profile (CRI `SecurityProfile`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SecurityProfile {
    /// The runtime's default profile.
    RuntimeDefault,
    /// No profile.
    #[default]
    Unconfined,
    /// A profile of the node: a seccomp profile's file, an AppArmor
    /// profile's name.
    Localhost(String),
}

/// SELinux labels (CRI `SELinuxOption`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeLinuxLabel {
    /// The SELinux user.
    pub user: String,
    /// The SELinux role.
    pub role: String,
    /// The SELinux type.
    pub kind: String,
    /// The SELinux level.
    pub level: String,
}

/// How supplemental groups are found (CRI `SupplementalGroupsPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SupplementalGroupsPolicy {
    /// The image's `/etc/group` groups of the user, and the pod's.
    #[default]
    Merge,
    /// Only the pod's.
    Strict,
}

/// What a pod's sandbox runs as and may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxSecurity {
    /// The namespaces it makes or shares.
    pub namespaces: Namespaces,
    /// The user its process runs as (the pod's `runAsUser`).
    pub run_as_user: Option<i64>,
    /// Its group (the pod's `runAsGroup`).
    pub run_as_group: Option<i64>,
    /// Its supplemental groups (`fsGroup`, then `supplementalGroups`).
    pub supplemental_groups: Vec<i64>,
    /// How the runtime adds the image's groups.
    pub supplemental_groups_policy: SupplementalGroupsPolicy,
    /// A container of the pod is privileged.
    pub privileged: bool,
    /// Its seccomp profile.
    pub seccomp: SecurityProfile,
    /// Its SELinux labels.
    pub selinux: Option<SeLinuxLabel>,
    /// The pod's sysctls, set in its namespaces.
    pub sysctls: BTreeMap<String, String>,
}

/// A container's capabilities beyond and below the runtime's default set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Added (`NET_ADMIN`, or `ALL`).
    pub add: Vec<String>,
    /// Dropped.
    pub drop: Vec<String>,
}

/// What a container runs as and may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerSecurity {
    /// The namespaces it uses.
    pub namespaces: Namespaces,
    /// Its capabilities, when the pod changes the default set.
    pub capabilities: Option<Capabilities>,
    /// It runs privileged.
    pub privileged: bool,
    /// Its user by id (the pod's, else the image's numeric user).
    pub run_as_user: Option<i64>,
    /// Its user by name (the image's, when it names one).
    pub run_as_username: String,
    /// Its group.
    pub run_as_group: Option<i64>,
    /// Its supplemental groups (`fsGroup`, then `supplementalGroups`).
    pub supplemental_groups: Vec<i64>,
    /// How the runtime adds the image's groups.
    pub supplemental_groups_policy: SupplementalGroupsPolicy,
    /// Its root filesystem is read-only.
    pub readonly_rootfs: bool,
    /// It may not gain privileges (`no_new_privs`).
    pub no_new_privs: bool,
    /// Its seccomp profile.
    pub seccomp: SecurityProfile,
    /// Its AppArmor profile, when the pod names one.
    pub apparmor: Option<SecurityProfile>,
    /// Its SELinux labels.
    pub selinux: Option<SeLinuxLabel>,
    /// Paths masked from it.
    pub masked_paths: Vec<String>,
    /// Paths it may only read.
    pub readonly_paths: Vec<String>,
}

/// Who an image runs as, as its configuration says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageUser {
    /// A numeric user.
    Id(i64),
    /// A user by name, to be found in the image's `/etc/passwd`.
    Name(String),
}

impl Default for ImageUser {
    /// An image that names no user runs as root.
    fn default() -> Self {
        Self::Id(0)
    }
}

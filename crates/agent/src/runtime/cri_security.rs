//! A sandbox's and a container's confinement in CRI's messages
//! (`LinuxSandboxSecurityContext`, `LinuxContainerSecurityContext`), field
//! for field as the kubelet fills them: an AppArmor profile also in the
//! deprecated string form older runtimes read, a seccomp profile always
//! set (the kubelet never leaves it to the runtime).

use nodeplugins_api::cri::v1 as cri;

use super::security::{
    ContainerSecurity, NamespaceMode, Namespaces, SandboxSecurity, SeLinuxLabel, SecurityProfile,
    SupplementalGroupsPolicy,
};

/// The sandbox's security context.
pub(super) fn sandbox_security(security: &SandboxSecurity) -> cri::LinuxSandboxSecurityContext {
    cri::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(&security.namespaces)),
        selinux_options: security.selinux.as_ref().map(selinux),
        run_as_user: security.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: security.run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: false,
        supplemental_groups: security.supplemental_groups.clone(),
        privileged: security.privileged,
        seccomp: Some(profile(&security.seccomp)),
        supplemental_groups_policy: groups_policy(security.supplemental_groups_policy),
        ..Default::default()
    }
}

/// The container's security context.
// The kubelet still fills the deprecated AppArmor string for runtimes that
// read only it.
#[allow(deprecated)]
pub(super) fn container_security(
    security: &ContainerSecurity,
) -> cri::LinuxContainerSecurityContext {
    cri::LinuxContainerSecurityContext {
        capabilities: security.capabilities.as_ref().map(|c| cri::Capability {
            add_capabilities: c.add.clone(),
            drop_capabilities: c.drop.clone(),
            ..Default::default()
        }),
        privileged: security.privileged,
        namespace_options: Some(namespace_options(&security.namespaces)),
        selinux_options: security.selinux.as_ref().map(selinux),
        run_as_user: security.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: security.run_as_group.map(|value| cri::Int64Value { value }),
        run_as_username: security.run_as_username.clone(),
        readonly_rootfs: security.readonly_rootfs,
        supplemental_groups: security.supplemental_groups.clone(),
        no_new_privs: security.no_new_privs,
        masked_paths: security.masked_paths.clone(),
        readonly_paths: security.readonly_paths.clone(),
        seccomp: Some(profile(&security.seccomp)),
        apparmor: security.apparmor.as_ref().map(profile),
        apparmor_profile: security
            .apparmor
            .as_ref()
            .map(deprecated_apparmor)
            .unwrap_or_default(),
        supplemental_groups_policy: groups_policy(security.supplemental_groups_policy),
        ..Default::default()
    }
}

/// The namespaces in CRI's terms.
fn namespace_options(namespaces: &Namespaces) -> cri::NamespaceOption {
    cri::NamespaceOption {
        network: mode(namespaces.network),
        pid: mode(namespaces.pid),
        ipc: mode(namespaces.ipc),
        ..Default::default()
    }
}

fn mode(mode: NamespaceMode) -> i32 {
    match mode {
        NamespaceMode::Pod => cri::NamespaceMode::Pod as i32,
        NamespaceMode::Container => cri::NamespaceMode::Container as i32,
        NamespaceMode::Node => cri::NamespaceMode::Node as i32,
    }
}

fn profile(profile: &SecurityProfile) -> cri::SecurityProfile {
    match profile {
        SecurityProfile::RuntimeDefault => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        SecurityProfile::Unconfined => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
        SecurityProfile::Localhost(reference) => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Localhost as i32,
            localhost_ref: reference.clone(),
        },
    }
}

/// An AppArmor profile as the annotation-era string (`runtime/default`,
/// `unconfined`, `localhost/<name>`).
fn deprecated_apparmor(profile: &SecurityProfile) -> String {
    match profile {
        SecurityProfile::RuntimeDefault => "runtime/default".into(),
        SecurityProfile::Unconfined => "unconfined".into(),
        SecurityProfile::Localhost(name) => format!("localhost/{name}"),
    }
}

fn selinux(label: &SeLinuxLabel) -> cri::SeLinuxOption {
    cri::SeLinuxOption {
        user: label.user.clone(),
        role: label.role.clone(),
        r#type: label.kind.clone(),
        level: label.level.clone(),
    }
}

fn groups_policy(policy: SupplementalGroupsPolicy) -> i32 {
    match policy {
        SupplementalGroupsPolicy::Merge => cri::SupplementalGroupsPolicy::Merge as i32,
        SupplementalGroupsPolicy::Strict => cri::SupplementalGroupsPolicy::Strict as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Capabilities;

    #[test]
    #[allow(deprecated)]
    fn a_localhost_apparmor_profile_is_sent_in_both_forms() {
        let security = ContainerSecurity {
            apparmor: Some(SecurityProfile::Localhost("k8s-deny-write".into())),
            ..Default::default()
        };
        let sent = container_security(&security);
        assert_eq!(sent.apparmor_profile, "localhost/k8s-deny-write");
        let apparmor = sent.apparmor.expect("an AppArmor profile");
        assert_eq!(
            apparmor.profile_type,
            cri::security_profile::ProfileType::Localhost as i32
        );
        assert_eq!(apparmor.localhost_ref, "k8s-deny-write");
    }

    #[test]
    #[allow(deprecated)]
    fn no_apparmor_profile_leaves_both_forms_empty() {
        let sent = container_security(&ContainerSecurity::default());
        assert!(sent.apparmor.is_none());
        assert_eq!(sent.apparmor_profile, "");
        // Seccomp is always sent: unconfined unless asked otherwise.
        assert_eq!(
            sent.seccomp.map(|s| s.profile_type),
            Some(cri::security_profile::ProfileType::Unconfined as i32)
        );
    }

    #[test]
    fn users_groups_and_capabilities_are_sent_as_given() {
        let security = ContainerSecurity {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            supplemental_groups: vec![2000, 4000],
            supplemental_groups_policy: SupplementalGroupsPolicy::Strict,
            capabilities: Some(Capabilities {
                add: vec!["NET_BIND_SERVICE".into()],
                drop: vec!["ALL".into()],
            }),
            namespaces: Namespaces {
                network: NamespaceMode::Node,
                pid: NamespaceMode::Pod,
                ipc: NamespaceMode::Node,
            },
            ..Default::default()
        };
        let sent = container_security(&security);
        assert_eq!(sent.run_as_user.map(|u| u.value), Some(1000));
        assert_eq!(sent.run_as_group.map(|g| g.value), Some(3000));
        assert_eq!(sent.supplemental_groups, vec![2000, 4000]);
        assert_eq!(
            sent.supplemental_groups_policy,
            cri::SupplementalGroupsPolicy::Strict as i32
        );
        let capabilities = sent.capabilities.expect("capabilities");
        assert_eq!(capabilities.add_capabilities, vec!["NET_BIND_SERVICE"]);
        assert_eq!(capabilities.drop_capabilities, vec!["ALL"]);
        let namespaces = sent.namespace_options.expect("namespaces");
        assert_eq!(namespaces.pid, cri::NamespaceMode::Pod as i32);
        assert_eq!(namespaces.ipc, cri::NamespaceMode::Node as i32);
    }
}

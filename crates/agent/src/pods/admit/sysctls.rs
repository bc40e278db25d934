//! The kubelet's sysctl admission (`sysctl.patternAllowlist`): a pod may
//! set only the safe sysctls (namespaced, isolated from the other pods;
//! those the running kernel namespaces), and none of a namespace it shares
//! with the node. A pod asking for another is refused for good with
//! `SysctlForbidden`. Every pod shares the node's network here, so a
//! `net.*` sysctl is refused for every pod (the kubelet refuses it for a
//! `hostNetwork` pod).

use k8s_openapi::api::core::v1::Pod;

/// The reason of a pod refused for a sysctl.
pub(crate) const SYSCTL_FORBIDDEN: &str = "SysctlForbidden";

/// The safe sysctls, each with the kernel (major, minor) that namespaces
/// it, when not every supported one does.
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", Some((4, 15))),
    ("net.ipv4.tcp_wmem", Some((4, 15))),
    ("net.ipv4.tcp_slow_start_after_idle", Some((4, 15))),
    ("net.ipv4.tcp_notsent_lowat", Some((4, 6))),
];

/// The namespace a sysctl is in, as the kubelet names it in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
    User,
    Other,
}

impl Namespace {
    fn of(sysctl: &str) -> Self {
        const IPC: &[&str] = &[
            "kernel.sem",
            "kernel.shmall",
            "kernel.shmmax",
            "kernel.shmmni",
            "kernel.shm_rmid_forced",
            "kernel.msgmax",
            "kernel.msgmnb",
            "kernel.msgmni",
        ];
        if IPC.contains(&sysctl) || sysctl.starts_with("fs.mqueue.") {
            Self::Ipc
        } else if sysctl.starts_with("net.") {
            Self::Net
        } else if sysctl.starts_with("user.") {
            Self::User
        } else {
            Self::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ipc => "IPC",
            Self::Net => "Net",
            Self::User => "User",
            Self::Other => "",
        }
    }
}

/// Why `pod` may not be admitted for its sysctls (the Event's and the
/// status's message), on a kernel of `kernel` (major, minor); none when
/// it may.
pub(crate) fn forbidden_sysctl(pod: &Pod, kernel: Option<(u32, u32)>) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let sysctls = spec.security_context.as_ref()?.sysctls.as_ref()?;
    let host_ipc = spec.host_ipc.unwrap_or(false);
    let host_users = spec.host_users.unwrap_or(true);
    for sysctl in sysctls {
        let name = normalize(&sysctl.name);
        let safe = SAFE_SYSCTLS.iter().any(|(safe, needs)| {
            *safe == name && needs.is_none_or(|needs| kernel.is_some_and(|k| k >= needs))
        });
        if !safe {
            return Some(format!("forbidden sysctl: {name:?} not allowlisted"));
        }
        let namespace = Namespace::of(&name);
        let shared = match namespace {
            Namespace::Ipc => host_ipc,
            Namespace::Net => true,
            Namespace::User => host_users,
            Namespace::Other => false,
        };
        if shared {
            return Some(format!(
                "forbidden sysctl: {name:?} not allowed with host {} enabled",
                namespace.name()
            ));
        }
    }
    None
}

/// The running kernel's (major, minor), when it can be read.
pub(crate) fn running_kernel() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A sysctl written with slashes (`net/ipv4/conf/eno2.100/rp_filter`) in
/// its dotted form (`net.ipv4.conf.eno2/100.rp_filter`).
fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(at) if name.as_bytes()[at] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, Sysctl};

    fn pod(sysctls: &[&str], host_ipc: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                host_ipc: Some(host_ipc),
                security_context: Some(PodSecurityContext {
                    sysctls: Some(
                        sysctls
                            .iter()
                            .map(|name| Sysctl {
                                name: name.to_string(),
                                value: "1".into(),
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const KERNEL: Option<(u32, u32)> = Some((6, 1));

    #[test]
    fn a_safe_sysctl_of_the_pods_own_namespace_is_admitted() {
        assert_eq!(
            forbidden_sysctl(&pod(&["kernel.shm_rmid_forced"], false), KERNEL),
            None
        );
        assert_eq!(forbidden_sysctl(&pod(&[], false), KERNEL), None);
    }

    #[test]
    fn an_unsafe_sysctl_is_refused_with_the_kubelets_message() {
        assert_eq!(
            forbidden_sysctl(&pod(&["kernel.msgmax"], false), KERNEL).as_deref(),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted")
        );
    }

    #[test]
    fn a_safe_sysctl_of_a_namespace_shared_with_the_node_is_refused() {
        assert_eq!(
            forbidden_sysctl(&pod(&["kernel.shm_rmid_forced"], true), KERNEL).as_deref(),
            Some("forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host IPC enabled")
        );
        // Every pod has the node's network.
        assert_eq!(
            forbidden_sysctl(&pod(&["net.ipv4.tcp_syncookies"], false), KERNEL).as_deref(),
            Some("forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled")
        );
    }

    #[test]
    fn a_sysctl_the_kernel_does_not_namespace_is_not_safe() {
        assert_eq!(
            forbidden_sysctl(&pod(&["net.ipv4.tcp_rmem"], false), Some((4, 14))).as_deref(),
            Some("forbidden sysctl: \"net.ipv4.tcp_rmem\" not allowlisted")
        );
        assert_eq!(
            forbidden_sysctl(&pod(&["net.ipv4.tcp_rmem"], false), None).as_deref(),
            Some("forbidden sysctl: \"net.ipv4.tcp_rmem\" not allowlisted")
        );
    }

    #[test]
    fn a_slashed_name_is_read_in_its_dotted_form() {
        assert_eq!(
            normalize("kernel/shm_rmid_forced"),
            "kernel.shm_rmid_forced"
        );
        assert_eq!(
            normalize("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(
            forbidden_sysctl(&pod(&["kernel/shm_rmid_forced"], false), KERNEL),
            None
        );
    }

    #[test]
    fn the_running_kernel_is_read() {
        assert!(running_kernel().is_some_and(|(major, _)| major >= 3));
    }
}

use std::path::Path;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities as ApiCapabilities, Container, Pod, PodSecurityContext, PodSpec,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const ROOT: &str = "/var/lib/kubelet/seccomp";

fn pod(context: Option<PodSecurityContext>, container: Option<SecurityContext>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            security_context: context,
            containers: vec![Container {
                name: "app".into(),
                security_context: container,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn security(pod: &Pod, user: &ImageUser) -> Result<ContainerSecurity, String> {
    let container = &pod.spec.as_ref().unwrap().containers[0];
    container_security(pod, container, user, Path::new(ROOT))
}

#[test]
fn the_containers_own_settings_win_over_the_pods() {
    let pod = pod(
        Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            fs_group: Some(2000),
            supplemental_groups: Some(vec![4000, 5000]),
            ..Default::default()
        }),
        Some(SecurityContext {
            run_as_user: Some(1001),
            ..Default::default()
        }),
    );
    let got = security(&pod, &ImageUser::Id(0)).unwrap();
    assert_eq!(got.run_as_user, Some(1001));
    assert_eq!(got.run_as_group, Some(3000));
    // fsGroup first, then the pod's supplemental groups.
    assert_eq!(got.supplemental_groups, vec![2000, 4000, 5000]);
    let sandbox = sandbox_security(&pod);
    assert_eq!(sandbox.run_as_user, Some(1000));
    assert_eq!(sandbox.run_as_group, Some(3000));
    assert_eq!(sandbox.supplemental_groups, vec![2000, 4000, 5000]);
    assert_eq!(sandbox.seccomp, SecurityProfile::RuntimeDefault);
}

#[test]
fn without_a_user_the_images_runs() {
    let pod = pod(None, None);
    let by_id = security(&pod, &ImageUser::Id(65534)).unwrap();
    assert_eq!(
        (by_id.run_as_user, by_id.run_as_username.as_str()),
        (Some(65534), "")
    );
    let by_name = security(&pod, &ImageUser::Name("nobody".into())).unwrap();
    assert_eq!(by_name.run_as_user, None);
    assert_eq!(by_name.run_as_username, "nobody");
    // Nothing asked: unconfined seccomp, no AppArmor profile, the default
    // masked and read-only paths, privileges may be gained.
    assert_eq!(by_id.seccomp, SecurityProfile::Unconfined);
    assert_eq!(by_id.apparmor, None);
    assert!(by_id.masked_paths.iter().any(|p| p == "/proc/kcore"));
    assert_eq!(by_id.readonly_paths.len(), 5);
    assert!(!by_id.no_new_privs && !by_id.readonly_rootfs && !by_id.privileged);
    assert!(by_id.capabilities.is_none());
}

#[test]
fn run_as_non_root_refuses_a_root_image_with_the_kubelets_message() {
    let pod = pod(
        Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        }),
        None,
    );
    assert_eq!(
        security(&pod, &ImageUser::Id(0)).unwrap_err(),
        "container has runAsNonRoot and image will run as root (pod: \"web_default(u1)\", container: app)"
    );
    assert_eq!(
        security(&pod, &ImageUser::Name("app".into())).unwrap_err(),
        "container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root (pod: \"web_default(u1)\", container: app)"
    );
    assert!(security(&pod, &ImageUser::Id(1000)).is_ok());
}

#[test]
fn run_as_non_root_refuses_a_root_run_as_user_and_admits_another() {
    let root = pod(
        Some(PodSecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        }),
        Some(SecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        }),
    );
    assert_eq!(
        security(&root, &ImageUser::Id(1000)).unwrap_err(),
        "container's runAsUser breaks non-root policy (pod: \"web_default(u1)\", container: app)"
    );
    let other = pod(
        Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_non_root: Some(true),
            ..Default::default()
        }),
        None,
    );
    // The image's root does not matter when the pod names a user.
    assert_eq!(
        security(&other, &ImageUser::Id(0)).unwrap().run_as_user,
        Some(1000)
    );
}

#[test]
fn privileges_capabilities_and_the_root_filesystem_are_the_containers() {
    let pod = pod(
        None,
        Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(ApiCapabilities {
                add: Some(vec!["NET_BIND_SERVICE".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            ..Default::default()
        }),
    );
    let got = security(&pod, &ImageUser::Id(0)).unwrap();
    assert!(got.no_new_privs && got.readonly_rootfs);
    assert_eq!(
        got.capabilities,
        Some(Capabilities {
            add: vec!["NET_BIND_SERVICE".into()],
            drop: vec!["ALL".into()],
        })
    );
}

#[test]
fn a_privileged_container_makes_the_sandbox_privileged() {
    let mut pod = pod(None, None);
    assert!(!sandbox_security(&pod).privileged);
    pod.spec.as_mut().unwrap().init_containers = Some(vec![Container {
        name: "setup".into(),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    assert!(sandbox_security(&pod).privileged);
}

#[test]
fn an_unmasked_proc_mount_masks_nothing() {
    let pod = pod(
        None,
        Some(SecurityContext {
            proc_mount: Some("Unmasked".into()),
            ..Default::default()
        }),
    );
    let got = security(&pod, &ImageUser::Id(0)).unwrap();
    assert!(got.masked_paths.is_empty() && got.readonly_paths.is_empty());
}

#[test]
fn seccomp_comes_from_the_container_then_the_pod() {
    let localhost = |file: Option<&str>| SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: file.map(str::to_string),
    };
    let pod_level = pod(
        Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        None,
    );
    assert_eq!(
        security(&pod_level, &ImageUser::Id(0)).unwrap().seccomp,
        SecurityProfile::RuntimeDefault
    );
    let own = pod(
        pod_level.spec.as_ref().unwrap().security_context.clone(),
        Some(SecurityContext {
            seccomp_profile: Some(localhost(Some("profiles/audit.json"))),
            ..Default::default()
        }),
    );
    assert_eq!(
        security(&own, &ImageUser::Id(0)).unwrap().seccomp,
        SecurityProfile::Localhost(format!("{ROOT}/profiles/audit.json"))
    );
    let missing = pod(
        None,
        Some(SecurityContext {
            seccomp_profile: Some(localhost(None)),
            ..Default::default()
        }),
    );
    assert_eq!(
        security(&missing, &ImageUser::Id(0)).unwrap_err(),
        "localhostProfile must be set if seccompProfile type is Localhost."
    );
}

#[test]
fn apparmor_comes_from_the_container_then_its_annotation_then_the_pod() {
    let mut pod = pod(
        Some(PodSecurityContext {
            app_armor_profile: Some(AppArmorProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        None,
    );
    assert_eq!(
        security(&pod, &ImageUser::Id(0)).unwrap().apparmor,
        Some(SecurityProfile::Unconfined)
    );
    pod.metadata.annotations = Some(
        [(
            "container.apparmor.security.beta.kubernetes.io/app".to_string(),
            "localhost/k8s-deny-write".to_string(),
        )]
        .into(),
    );
    assert_eq!(
        security(&pod, &ImageUser::Id(0)).unwrap().apparmor,
        Some(SecurityProfile::Localhost("k8s-deny-write".into()))
    );
    pod.spec.as_mut().unwrap().containers[0].security_context = Some(SecurityContext {
        app_armor_profile: Some(AppArmorProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    });
    assert_eq!(
        security(&pod, &ImageUser::Id(0)).unwrap().apparmor,
        Some(SecurityProfile::RuntimeDefault)
    );
}

#[test]
fn host_and_shared_namespaces_follow_the_pod() {
    let mut pod = pod(None, None);
    assert_eq!(namespaces(&pod), Namespaces::default());
    let spec = pod.spec.as_mut().unwrap();
    spec.share_process_namespace = Some(true);
    assert_eq!(namespaces(&pod).pid, NamespaceMode::Pod);
    let spec = pod.spec.as_mut().unwrap();
    spec.host_pid = Some(true);
    spec.host_ipc = Some(true);
    let got = namespaces(&pod);
    assert_eq!(
        (got.pid, got.ipc),
        (NamespaceMode::Node, NamespaceMode::Node)
    );
}

#[test]
fn an_unknown_groups_policy_fails_the_container() {
    let pod = pod(
        Some(PodSecurityContext {
            supplemental_groups_policy: Some("Loose".into()),
            ..Default::default()
        }),
        None,
    );
    assert_eq!(
        security(&pod, &ImageUser::Id(0)).unwrap_err(),
        "unsupported supplementalGroupsPolicy: Loose"
    );
}

#[test]
fn the_pods_sysctls_go_to_its_sandbox() {
    let pod = pod(
        Some(PodSecurityContext {
            sysctls: Some(vec![k8s_openapi::api::core::v1::Sysctl {
                name: "kernel.shm_rmid_forced".into(),
                value: "1".into(),
            }]),
            ..Default::default()
        }),
        None,
    );
    assert_eq!(
        sandbox_security(&pod)
            .sysctls
            .get("kernel.shm_rmid_forced")
            .map(String::as_str),
        Some("1")
    );
}

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::pods::run_options::expand::expand;
use crate::pods::run_options::runtime_spec::tests::pod;
use crate::runtime::DeviceNodeSpec;
use crate::runtime::{CONTAINER_NAME_LABEL, MountSpec};

fn resources() -> ContainerResources {
    ContainerResources {
        name: "main".into(),
        envs: [("EXAMPLE_DEVICES".to_string(), "dev-0".to_string())].into(),
        mounts: vec![MountSpec {
            container_path: "/var/run/example-device".into(),
            host_path: "/var/run/example-device".into(),
            read_only: true,
            propagation: crate::runtime::MountPropagation::Private,
            selinux_relabel: false,
            recursive_read_only: false,
            image: None,
        }],
        device_specs: vec![DeviceNodeSpec {
            container_path: "/dev/dev-0".into(),
            host_path: "/dev/null".into(),
            permissions: "rw".into(),
        }],
        annotations: [
            ("example.com/devices".to_string(), "dev-0".to_string()),
            (
                "io.kubernetes.container.restartCount".to_string(),
                "99".to_string(),
            ),
        ]
        .into(),
        cdi_devices: vec!["example.com/device=dev-0".into()],
        claim_cdi_devices: vec!["dra.example.com/gpu=gpu-1".into()],
        ..ContainerResources::default()
    }
}

#[test]
fn a_container_gets_the_plugins_answers_and_its_own_settings_as_the_kubelet_sends_them() {
    let pod = pod();
    let main = &pod.spec.as_ref().unwrap().containers[0];
    let node = NodeGiven {
        service_env: &[],
        pod_files: None,
        volumes: None,
        recursive_read_only: false,
        images: &BTreeMap::new(),
        env_objects: &EnvObjects::default(),
        allocatable: &BTreeMap::new(),
        image_user: &crate::runtime::ImageUser::default(),
        seccomp_root: std::path::Path::new("/var/lib/kubelet/seccomp"),
        node_ip: None,
    };
    let spec = run_container_spec(&pod, main, &resources(), &node, 2).unwrap();
    assert_eq!(spec.attempt, 2);
    assert_eq!(spec.log_path, "main/2.log");
    assert_eq!(
        spec.envs,
        [
            ("EXAMPLE_DEVICES".to_string(), "dev-0".to_string()),
            ("GREETING".to_string(), "hello".to_string()),
            ("POD".to_string(), "train".to_string()),
            // NODE comes after WHERE: not defined yet, left as it is.
            ("WHERE".to_string(), "train on $(NODE)".to_string()),
            ("NODE".to_string(), "node-1".to_string()),
        ]
    );
    assert_eq!(spec.args, ["echo hello dev-0 $(MISSING) $(LITERAL)"]);
    assert_eq!(spec.command, ["sh", "-c"]);
    assert_eq!(
        spec.cdi_devices,
        ["dra.example.com/gpu=gpu-1", "example.com/device=dev-0"],
        "the claims' first"
    );
    assert_eq!(spec.mounts.len(), 1);
    assert_eq!(spec.devices.len(), 1);
    assert_eq!(spec.labels.len(), 4);
    assert_eq!(spec.labels[CONTAINER_NAME_LABEL], "main");
    let annotations = &spec.annotations;
    assert_eq!(annotations["example.com/devices"], "dev-0");
    assert_eq!(
        annotations["io.kubernetes.container.restartCount"], "2",
        "the kubelet's own annotations win over a plugin's"
    );
    assert_eq!(annotations["io.kubernetes.container.hash"], "4b6a4f93");
    assert_eq!(annotations["io.kubernetes.pod.terminationGracePeriod"], "5");
    assert_eq!(
        annotations["io.kubernetes.container.terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(
        annotations["io.kubernetes.container.terminationMessagePolicy"],
        "File"
    );
    assert_eq!(
        annotations["io.kubernetes.container.ports"],
        r#"[{"containerPort":8080,"protocol":"TCP"}]"#
    );
}

#[test]
fn the_services_follow_the_containers_own_variables_and_the_pods_files_the_plugins_mounts() {
    let pod = pod();
    let main = &pod.spec.as_ref().unwrap().containers[0];
    let dir = tempfile::tempdir().unwrap();
    let files = PodFiles::new(dir.path(), "u1");
    let services = [
        ("GREETING".to_string(), "from a service".to_string()),
        ("WEB_SERVICE_HOST".to_string(), "10.0.0.9".to_string()),
    ];
    let node = NodeGiven {
        service_env: &services,
        pod_files: Some(&files),
        volumes: None,
        recursive_read_only: false,
        images: &BTreeMap::new(),
        env_objects: &EnvObjects::default(),
        allocatable: &BTreeMap::new(),
        image_user: &crate::runtime::ImageUser::default(),
        seccomp_root: std::path::Path::new("/var/lib/kubelet/seccomp"),
        node_ip: None,
    };
    let options = run_options(&pod, main, &resources(), &node).unwrap();
    let names: Vec<&str> = options.envs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "EXAMPLE_DEVICES",
            "GREETING",
            "POD",
            "WHERE",
            "NODE",
            "WEB_SERVICE_HOST"
        ],
        "a service's variable the container sets itself is left out"
    );
    let paths: Vec<&str> = options
        .mounts
        .iter()
        .map(|m| m.container_path.as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/var/run/example-device",
            "/etc/hosts",
            "/dev/termination-log"
        ],
        "the device plugins' mounts first, then the pod's files"
    );
    assert!(
        options.mounts[2]
            .host_path
            .starts_with(&dir.path().join("u1").display().to_string()),
        "the termination log is made under the pod's directory"
    );
}

#[test]
fn expansion_follows_the_kubelets_rules() {
    let lookup = |name: &str| (name == "A").then(|| "x".to_string());
    assert_eq!(expand("$(A)-$(B)-$$(A)-$-$", lookup), "x-$(B)-$(A)-$-$");
    assert_eq!(expand("$(A", lookup), "$(A");
}

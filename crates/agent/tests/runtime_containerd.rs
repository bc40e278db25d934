//! The CRI runtime against a real containerd (v2.4.2 on Debian's runc,
//! built by `interop/`): a host-network sandbox and a busybox container
//! given what the kubelet hands a runtime (environment, a device node, a
//! mount, a CDI device resolved from a spec file), read back from inside
//! the container through its log; container events; a deadline and the
//! kubelet's metrics on every call; a containerd killed and started again.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use nodeplugins::device::{DeviceNodeSpec, MountSpec};
use nodeplugins::runtime::{
    ContainerEventKind, ContainerRuntime, ContainerSpec, ContainerState, CriRuntime, PodIdentity,
    PullPolicy, RUNTIME_REQUEST_TIMEOUT, RuntimeMetrics, SandboxSpec,
};
use nodeplugins_test_support::containerd::{Containerd, cri_log_lines};
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

fn sandbox(logs: &std::path::Path) -> SandboxSpec {
    let pod = PodIdentity {
        namespace: "default".into(),
        name: "probe".into(),
        uid: "0b5e6f3a-uid".into(),
    };
    SandboxSpec {
        log_directory: logs
            .join("default_probe_0b5e6f3a-uid")
            .display()
            .to_string(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        attempt: 0,
        pod,
        dns: None,
        ..SandboxSpec::default()
    }
}

/// A CRI runtime on `containerd`, with the metrics it counts in.
fn runtime_on(containerd: &Containerd) -> (CriRuntime, RuntimeMetrics) {
    let metrics = RuntimeMetrics::default();
    let runtime = CriRuntime::new(
        &containerd.endpoint(),
        RUNTIME_REQUEST_TIMEOUT,
        metrics.clone(),
    )
    .unwrap();
    (runtime, metrics)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_gets_what_the_kubelet_hands_a_runtime_and_its_lifecycle_is_told() {
    nodeplugins_test_support::init_tracing();
    let containerd = Containerd::start().await;
    let (runtime, metrics) = runtime_on(&containerd);
    let version = runtime.version().await.unwrap();
    assert_eq!(
        (version.name.as_str(), version.api_version.as_str()),
        ("containerd", "v1")
    );

    // What a device plugin and a DRA driver hand on: a device node, a
    // mount, environment, and a CDI device whose spec file adds more.
    let scratch = tempfile::tempdir().unwrap();
    std::fs::write(scratch.path().join("hello"), "from the plugin\n").unwrap();
    std::fs::write(
        containerd.cdi_dir().join("test-gpu.json"),
        serde_json::json!({
            "cdiVersion": "0.6.0",
            "kind": "nodeplugins.test/gpu",
            "devices": [{
                "name": "gpu0",
                "containerEdits": {
                    "env": ["CDI_GPU=gpu0"],
                    "deviceNodes": [{"path": "/dev/gpu0", "hostPath": "/dev/null"}],
                },
            }],
        })
        .to_string(),
    )
    .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let sandbox = sandbox(logs.path());
    let mut events = runtime.container_events().await.unwrap();

    let image = runtime
        .ensure_image(BUSYBOX, PullPolicy::IfNotPresent, &sandbox)
        .await
        .unwrap();
    let sandbox_id = runtime.run_sandbox(&sandbox).await.unwrap();
    let container = ContainerSpec {
        name: "main".into(),
        image: BUSYBOX.into(),
        command: vec!["sh".into(), "-c".into()],
        args: vec![
            "trap '' TERM; env; ls /dev; cat /plugin/hello; echo ready; exec sleep 3600".into(),
        ],
        envs: vec![
            ("FROM_POD".into(), "1".into()),
            ("DEVICE_IDS".into(), "dev-0".into()),
        ],
        mounts: vec![MountSpec {
            container_path: "/plugin".into(),
            host_path: scratch.path().display().to_string(),
            read_only: true,
            propagation: nodeplugins::runtime::MountPropagation::Private,
            selinux_relabel: false,
            recursive_read_only: false,
            image: None,
        }],
        devices: vec![DeviceNodeSpec {
            container_path: "/dev/plugin0".into(),
            host_path: "/dev/zero".into(),
            permissions: "rw".into(),
        }],
        cdi_devices: vec!["nodeplugins.test/gpu=gpu0".into()],
        log_path: "main/0.log".into(),
        ..ContainerSpec::default()
    };
    let id = runtime
        .create_container(&sandbox_id, &sandbox, &container, &image)
        .await
        .unwrap();
    runtime.start_container(&id).await.unwrap();

    let log = std::path::Path::new(&sandbox.log_directory).join("main/0.log");
    let lines = eventually("the container's output", TIMEOUT, || async {
        let lines = cri_log_lines(&log);
        lines.iter().any(|l| l == "ready").then_some(lines)
    })
    .await;
    for wanted in [
        "FROM_POD=1",
        "DEVICE_IDS=dev-0",
        "CDI_GPU=gpu0",
        "plugin0",
        "gpu0",
        "from the plugin",
    ] {
        assert!(lines.iter().any(|l| l == wanted), "{wanted} in {lines:?}");
    }
    let status = runtime.container_status(&id).await.unwrap();
    assert_eq!(status.state, ContainerState::Running);
    assert_eq!(status.pod.uid, sandbox.pod.uid);
    assert!(status.started_at.is_some());

    // The container ignores SIGTERM: it is killed once its grace period is
    // over.
    runtime
        .stop_container(&id, Duration::from_secs(1))
        .await
        .unwrap();
    let status = runtime.container_status(&id).await.unwrap();
    assert_eq!(
        (status.state, status.exit_code),
        (ContainerState::Exited, Some(137))
    );
    let mut seen = Vec::new();
    while !seen.contains(&ContainerEventKind::Stopped) {
        let event = tokio::time::timeout(TIMEOUT, events.next())
            .await
            .expect("container events")
            .unwrap()
            .unwrap();
        if event.container_id == id {
            seen.push(event.kind);
        }
    }
    assert_eq!(
        seen,
        [
            ContainerEventKind::Created,
            ContainerEventKind::Started,
            ContainerEventKind::Stopped
        ]
    );

    runtime.remove_container(&id).await.unwrap();
    runtime.stop_sandbox(&sandbox_id).await.unwrap();
    runtime.remove_sandbox(&sandbox_id).await.unwrap();
    assert!(runtime.sandboxes().await.unwrap().is_empty());
    assert!(runtime.containers().await.unwrap().is_empty());
    for operation in [
        "run_podsandbox",
        "create_container",
        "start_container",
        "stop_container",
    ] {
        assert_eq!(metrics.operations(operation), 1, "{operation}");
    }
    assert_eq!(metrics.errors("create_container"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn containerd_killed_and_started_again_is_reached_again_and_its_containers_ran_on() {
    nodeplugins_test_support::init_tracing();
    let mut containerd = Containerd::start().await;
    let (runtime, metrics) = runtime_on(&containerd);
    let logs = tempfile::tempdir().unwrap();
    let sandbox = sandbox(logs.path());
    let image = runtime
        .ensure_image(BUSYBOX, PullPolicy::Never, &sandbox)
        .await
        .unwrap();
    let sandbox_id = runtime.run_sandbox(&sandbox).await.unwrap();
    let container = ContainerSpec {
        name: "main".into(),
        image: BUSYBOX.into(),
        command: vec!["sleep".into(), "3600".into()],
        log_path: "main/0.log".into(),
        ..ContainerSpec::default()
    };
    let id = runtime
        .create_container(&sandbox_id, &sandbox, &container, &image)
        .await
        .unwrap();
    runtime.start_container(&id).await.unwrap();

    containerd.kill().await;
    let refused = runtime.containers().await.unwrap_err();
    assert_eq!(refused.code(), Some(tonic::Code::Unavailable), "{refused}");
    assert!(metrics.errors("list_containers") >= 1);

    containerd.restart().await;
    let containers = eventually("containerd answers again", TIMEOUT, || async {
        runtime.containers().await.ok()
    })
    .await;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].id, id);
    assert_eq!(
        containers[0].state,
        ContainerState::Running,
        "the container ran on"
    );

    let missing = runtime
        .container_status("no-such-container")
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    runtime.stop_sandbox(&sandbox_id).await.unwrap();
    runtime.remove_sandbox(&sandbox_id).await.unwrap();
}

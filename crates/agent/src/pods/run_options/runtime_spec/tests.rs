// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

/// A pod of one container with the settings the kubelet reads (also the
/// assembly's tests').
pub(in crate::pods) fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "namespace": "ml", "name": "train", "uid": "u1",
            "labels": {"app": "train", "io.kubernetes.pod.name": "spoofed"},
            "annotations": {"team": "a"},
        },
        "spec": {
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": "nodeplugins.local/busybox:1",
                "command": ["sh", "-c"],
                "args": ["echo $(GREETING) $(EXAMPLE_DEVICES) $(MISSING) $$(LITERAL)"],
                "env": [
                    {"name": "GREETING", "value": "hello"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "WHERE", "value": "$(POD) on $(NODE)"},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            }],
        },
        "status": {"hostIP": "10.0.0.1"},
    }))
    .unwrap()
}

#[test]
fn the_sandbox_has_the_pods_labels_under_the_kubelets_and_its_log_directory() {
    let sandbox = sandbox_spec(&pod(), 0, crate::runtime::POD_LOGS_DIR);
    assert_eq!(sandbox.log_directory, "/var/log/pods/ml_train_u1");
    assert_eq!(sandbox.labels["app"], "train");
    assert_eq!(
        sandbox.labels[POD_NAME_LABEL], "train",
        "the kubelet's label wins"
    );
    assert_eq!(sandbox.labels[POD_UID_LABEL], "u1");
    assert_eq!(sandbox.annotations["team"], "a");
    assert_eq!(sandbox.pod.namespace, "ml");
}

#[test]
fn the_container_hash_is_the_kubelets() {
    // Computed by the kubelet v1.37.2's own HashContainer.
    for (name, image, hash) in [
        ("main", "nodeplugins.local/busybox:1", 0x4b6a_4f93),
        ("a", "b", 0x646f_ef1b),
    ] {
        let container = Container {
            name: name.into(),
            image: Some(image.into()),
            ..Container::default()
        };
        assert_eq!(container_hash(&container), hash, "{name} {image}");
    }
}

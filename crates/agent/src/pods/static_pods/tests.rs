use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::manifest::{Manifests, read};

const NODE: &str = "node-a";

/// A directory of manifests covering what the file source reads, defaults
/// and refuses.
fn manifests(dir: &Path) {
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    // YAML, with what the API defaults: probes, ports, env, limits.
    write(
        "etcd.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n  labels:\n    component: etcd\n  annotations:\n    note: kept\nspec:\n  hostNetwork: true\n  priorityClassName: system-node-critical\n  priority: 2000001000\n  containers:\n  - name: etcd\n    image: registry.k8s.io/etcd:3.6.5-0\n    command: [etcd, --data-dir=/var/lib/etcd]\n    ports:\n    - containerPort: 2379\n    env:\n    - name: POD_IP\n      valueFrom:\n        fieldRef:\n          fieldPath: status.podIP\n    resources:\n      limits:\n        memory: 512Mi\n      requests:\n        cpu: 100m\n    livenessProbe:\n      httpGet:\n        port: 2381\n        path: /livez\n      failureThreshold: 8\n    startupProbe:\n      tcpSocket:\n        port: 2381\n    volumeMounts:\n    - name: data\n      mountPath: /var/lib/etcd\n  volumes:\n  - name: data\n    hostPath:\n      path: /var/lib/etcd\n      type: DirectoryOrCreate\n  - name: scratch\n",
    );
    // JSON, in the default namespace, an image at latest.
    write(
        "web.json",
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"web","image":"busybox","lifecycle":{"preStop":{"httpGet":{"port":80}}}}],"initContainers":[{"name":"setup","image":"busybox:1.36","resources":{"limits":{"cpu":"1"}}}],"tolerations":[{"operator":"Exists","effect":"NoExecute"}],"volumes":[{"name":"info","downwardAPI":{"items":[{"path":"name","fieldRef":{"fieldPath":"metadata.name"}}]}}]}}"#,
    );
    // A UID of its own, kept.
    write(
        "fixed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fixed\n  uid: 0f1e2d3c-aaaa-bbbb-cccc-000000000001\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000\n",
    );
    // Two of one name: the later file's is read.
    write(
        "twin-a.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: twin\n  labels:\n    file: a\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    write(
        "twin-b.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: twin\n  labels:\n    file: b\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    // Refused: what needs the API.
    write(
        "secret.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: secret\nspec:\n  containers:\n  - name: c\n    image: busybox\n  volumes:\n  - name: s\n    secret:\n      secretName: s\n",
    );
    write(
        "token.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: token\nspec:\n  containers:\n  - name: c\n    image: busybox\n  volumes:\n  - name: t\n    projected:\n      sources:\n      - serviceAccountToken:\n          path: token\n",
    );
    write(
        "account.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: account\nspec:\n  serviceAccountName: builder\n  containers:\n  - name: c\n    image: busybox\n",
    );
    write(
        "env.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: env\nspec:\n  containers:\n  - name: c\n    image: busybox\n    envFrom:\n    - configMapRef:\n        name: settings\n",
    );
    write(
        "claim.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: claim\nspec:\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - name: v\n      mountPath: /v\n  volumes:\n  - name: v\n    persistentVolumeClaim:\n      claimName: data\n",
    );
    // Refused: no valid pod.
    write(
        "nameless.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    a: b\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    write(
        "imageless.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: imageless\nspec:\n  containers:\n  - name: c\n",
    );
    write(
        "badmount.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: badmount\nspec:\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - name: missing\n      mountPath: /m\n",
    );
    write("garbage.yaml", "this: is: not: yaml: [\n");
    write(
        "service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\nspec:\n  ports:\n  - port: 80\n",
    );
    // Not read: hidden, and a directory.
    write(
        ".hidden.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hidden\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    std::fs::create_dir(dir.join("nested")).unwrap();
    std::fs::write(
        dir.join("nested/inner.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: inner\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    )
    .unwrap();
}

fn pod_named<'a>(manifests: &'a Manifests, name: &str) -> &'a k8s_openapi::api::core::v1::Pod {
    &manifests
        .pods
        .iter()
        .find(|p| p.pod.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no pod {name} in {manifests:?}"))
        .pod
}

#[test]
fn a_static_pod_is_named_for_the_node_placed_on_it_and_tolerates_its_problems() {
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path());
    let read = read(dir.path(), "Node-A").unwrap();
    let etcd = pod_named(&read, "etcd-node-a");
    assert_eq!(etcd.metadata.namespace.as_deref(), Some("kube-system"));
    let spec = etcd.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("Node-A"));
    let tolerations = spec.tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(tolerations[0].effect.as_deref(), Some("NoExecute"));
    let annotations = etcd.metadata.annotations.as_ref().unwrap();
    let uid = etcd.metadata.uid.clone().unwrap();
    assert_eq!(uid.len(), 32);
    assert_eq!(annotations["kubernetes.io/config.hash"], uid);
    assert_eq!(annotations["kubernetes.io/config.source"], "file");
    assert_eq!(annotations["note"], "kept");
    let web = pod_named(&read, "web-node-a");
    assert_eq!(web.metadata.namespace.as_deref(), Some("default"));
    // The toleration it had is not given twice.
    assert_eq!(
        web.spec
            .as_ref()
            .unwrap()
            .tolerations
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    let fixed = pod_named(&read, "fixed-node-a");
    assert_eq!(
        fixed.metadata.uid.as_deref(),
        Some("0f1e2d3c-aaaa-bbbb-cccc-000000000001")
    );
    let twin = pod_named(&read, "twin-node-a");
    assert_eq!(twin.metadata.labels.as_ref().unwrap()["file"], "b");
    assert_eq!(read.pods.len(), 4, "{read:?}");
}

#[test]
fn a_static_pods_uid_is_stable_and_changes_with_its_manifest_node_or_file() {
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path());
    let uid = |node: &str| {
        pod_named(&read(dir.path(), node).unwrap(), &format!("web-{node}"))
            .metadata
            .uid
            .clone()
            .unwrap()
    };
    let first = uid(NODE);
    assert_eq!(uid(NODE), first, "read again, the same pod");
    assert_ne!(uid("node-b"), first, "another node's");
    let text = std::fs::read_to_string(dir.path().join("web.json")).unwrap();
    std::fs::write(
        dir.path().join("web.json"),
        text.replace("busybox:1.36", "busybox:1.37"),
    )
    .unwrap();
    assert_ne!(uid(NODE), first, "its manifest changed");
    std::fs::rename(dir.path().join("web.json"), dir.path().join("web2.json")).unwrap();
    std::fs::write(dir.path().join("web.json"), text).unwrap();
    std::fs::remove_file(dir.path().join("web2.json")).unwrap();
    assert_eq!(uid(NODE), first, "the same manifest in the same file");
}

#[test]
fn a_manifest_that_needs_the_api_or_is_no_valid_pod_is_refused_and_the_others_run() {
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path());
    let read = read(dir.path(), NODE).unwrap();
    let reason = |file: &str| {
        read.refused
            .iter()
            .find(|r| r.file == dir.path().join(file))
            .map(|r| r.error.clone())
            .unwrap_or_else(|| panic!("{file} not refused: {read:?}"))
    };
    assert_eq!(
        reason("secret.yaml"),
        "static pods may not reference secrets"
    );
    assert!(reason("token.yaml").contains(
        "serviceAccountToken: Forbidden: must not be specified when serviceAccountName is not set"
    ));
    assert_eq!(
        reason("account.yaml"),
        "static pods may not reference serviceaccounts"
    );
    assert_eq!(
        reason("env.yaml"),
        "static pods may not reference configmaps"
    );
    assert_eq!(
        reason("claim.yaml"),
        "static pods may not reference persistentvolumeclaims"
    );
    assert_eq!(
        reason("nameless.yaml"),
        "invalid pod: name is needed for the pod"
    );
    assert!(reason("imageless.yaml").contains("spec.containers[0].image: Required value"));
    assert!(reason("badmount.yaml").contains("volumeMounts[0].name: Not found"));
    assert!(reason("garbage.yaml").contains("couldn't parse as pod"));
    assert!(reason("service.yaml").starts_with("invalid pod"));
    assert!(reason("twin-a.yaml").contains("twin-b.yaml is read instead"));
    assert_eq!(read.refused.len(), 11, "{read:?}");
}

#[test]
fn a_missing_path_holds_no_pods_and_one_file_is_one_pod() {
    let dir = tempfile::tempdir().unwrap();
    let missing = read(&dir.path().join("absent"), NODE).unwrap();
    assert!(missing.pods.is_empty() && missing.refused.is_empty());
    manifests(dir.path());
    let one = read(&dir.path().join("web.json"), NODE).unwrap();
    assert_eq!(one.pods.len(), 1);
}

#[test]
fn the_api_defaults_pull_policy_from_the_images_tag() {
    use super::api_defaults::pull_policy;
    for (image, policy) in [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("localhost:5000/busybox", "Always"),
        ("localhost:5000/busybox:v1", "IfNotPresent"),
        ("busybox@sha256:00", "IfNotPresent"),
        ("busybox:latest@sha256:00", "Always"),
    ] {
        assert_eq!(pull_policy(Some(image)), policy, "{image}");
    }
}

/// What the kubelet's file source and pod config make of `dir`.
fn kubelet_reads(dir: &Path) -> Value {
    let program = nodeplugins_test_support::go_programs::go_program("kubelet-static-pods");
    let out = Command::new(program).arg(dir).arg(NODE).output().unwrap();
    assert!(
        out.status.success(),
        "kubelet-static-pods failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `value` without nulls and empty objects (Go writes a struct it holds
/// by value even when empty, such as a container's `resources: {}`).
fn without_empty(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, without_empty(v)))
                .filter(|(_, v)| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_empty).collect()),
        other => other,
    }
}

/// A pod as JSON without what differs by design: the UID and its hash
/// annotation (the kubelet hashes its own Go structure), and the first-seen
/// time (the kubelet stamps it when its pod config first sees the pod);
/// and the kind and version, which the kubelet's decoder drops and ours
/// writes.
fn comparable(pod: Value) -> Value {
    let mut pod = without_empty(pod);
    let object = pod.as_object_mut().unwrap();
    object.remove("apiVersion");
    object.remove("kind");
    let metadata = pod["metadata"].as_object_mut().unwrap();
    metadata.remove("uid");
    metadata.remove("creationTimestamp");
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove("kubernetes.io/config.hash");
        annotations.remove("kubernetes.io/config.seen");
    }
    pod
}

#[test]
fn the_static_pod_path_reads_as_the_kubelets_file_source_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path());
    let kubelet = kubelet_reads(dir.path());
    let ours = read(dir.path(), NODE).unwrap();
    let mut theirs: Vec<Value> = kubelet["pods"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(comparable)
        .collect();
    let mut mine: Vec<Value> = ours
        .pods
        .iter()
        .map(|p| comparable(serde_json::to_value(&p.pod).unwrap()))
        .collect();
    let by_name = |v: &Value| v["metadata"]["name"].as_str().unwrap_or("").to_string();
    theirs.sort_by_key(by_name);
    mine.sort_by_key(by_name);
    assert_eq!(
        serde_json::to_string_pretty(&mine).unwrap(),
        serde_json::to_string_pretty(&theirs).unwrap()
    );
    // A manifest's own UID is kept by both.
    let fixed = kubelet["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["name"] == json!("fixed-node-a"))
        .unwrap();
    assert_eq!(
        fixed["metadata"]["uid"],
        "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
    );
    // Both refuse the same manifests, those that name API objects with the
    // same words.
    let theirs: Vec<String> = kubelet["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    // The kubelet says nothing of a pod another file names too.
    let refused: Vec<_> = ours
        .refused
        .iter()
        .filter(|r| !r.error.starts_with(super::manifest::DUPLICATE))
        .collect();
    for refused in &refused {
        let file = refused.file.display().to_string();
        let said = theirs
            .iter()
            .find(|e| e.starts_with(&format!("{file}: ")))
            .unwrap_or_else(|| panic!("the kubelet did not refuse {file}: {theirs:?}"));
        if refused.error.starts_with("static pods may not") {
            assert_eq!(said, &format!("{file}: {}", refused.error));
        }
    }
    assert_eq!(theirs.len(), refused.len(), "{theirs:#?}");
}

#[tokio::test]
async fn the_static_pod_path_is_followed_as_its_manifests_come_change_and_go() {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio_util::sync::CancellationToken;

    use super::source::{StaticPodsConfig, follow};

    let dir = tempfile::tempdir().unwrap();
    let (sender, mut pods) = watch::channel(None);
    let stop = CancellationToken::new();
    // Read again only when inotify says so.
    let config = StaticPodsConfig {
        path: dir.path().to_path_buf(),
        check_frequency: Duration::from_secs(3600),
    };
    let task = tokio::spawn(follow(
        config,
        NODE.into(),
        crate::fs_watch::FsWatcher::new(),
        sender,
        stop.clone(),
    ));
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), pods.changed())
            .await
            .expect("the static pods in time")
            .unwrap();
        pods.borrow_and_update().clone().expect("read")
    };
    assert!(next().await.is_empty(), "an empty path is read as empty");
    let manifest = |image: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    };
    // Written through a temporary name and renamed, as tools write.
    std::fs::write(dir.path().join(".web.yaml.tmp"), manifest("busybox:1.36")).unwrap();
    std::fs::rename(
        dir.path().join(".web.yaml.tmp"),
        dir.path().join("web.yaml"),
    )
    .unwrap();
    let first = next().await;
    assert_eq!(first.len(), 1);
    let (uid, pod) = first.iter().next().unwrap();
    let seen = pod.metadata.annotations.as_ref().unwrap()["kubernetes.io/config.seen"].clone();
    assert!(seen.ends_with('Z') && seen.contains('T'), "{seen}");
    std::fs::write(dir.path().join(".web.yaml.tmp"), manifest("busybox:1.37")).unwrap();
    std::fs::rename(
        dir.path().join(".web.yaml.tmp"),
        dir.path().join("web.yaml"),
    )
    .unwrap();
    let changed = next().await;
    assert_eq!(changed.len(), 1);
    assert!(
        !changed.contains_key(uid),
        "a changed manifest is a new pod"
    );
    std::fs::remove_file(dir.path().join("web.yaml")).unwrap();
    assert!(next().await.is_empty());
    stop.cancel();
    task.await.unwrap();
}

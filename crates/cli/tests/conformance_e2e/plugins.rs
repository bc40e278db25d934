//! Real plugins: the SDK's examples, the kubelet's own device plugins,
//! and DRA drivers on the Go helper.

use super::common::claims::allocated_claim;
use super::common::kube::api_with_nodes;
use super::{claims_file, conformance, ids, path, with};

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_programs::go_program;

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_device_plugin_passes_every_rule_restarts_included() {
    let root = tempfile::tempdir().unwrap();
    let kubelet_dir = root.path().join("device-plugins");
    let exec = format!(
        "exec {} --root-dir {} --resource example.com/gpu --devices 4",
        path(&binary("nodeplugins-sdk-bins", "example-device-plugin")),
        path(root.path())
    );
    let junit = root.path().join("junit.xml");
    let (code, report) = conformance(&[
        "--kubelet-dir",
        &path(&kubelet_dir),
        "--exec",
        &exec,
        "--restarts",
        "--junit",
        &path(&junit),
    ])
    .await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(code, Some(0));
    assert!(with(&report, "PASS").contains("device.kubelet-restart"));
    assert!(with(&report, "PASS").contains("device.allocate.unknown-ids"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let rules = report["outcomes"].as_array().unwrap().len();
    assert!(
        xml.contains(&format!(r#"tests="{rules}" failures="0""#)),
        "{xml}"
    );
}

/// The SDK writes a device plugin's CDI spec and names its devices in
/// Allocate: the names resolve in the spec directory. Naming CDI devices
/// no spec describes (what the example does without `--cdi-dir`) fails
/// the response rule alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_device_plugins_cdi_devices_resolve_to_the_spec_the_sdk_writes() {
    let root = tempfile::tempdir().unwrap();
    let cdi = root.path().join("cdi");
    let run = |plugin_cdi: bool| {
        let mut exec = format!(
            "exec {} --root-dir {} --resource example.com/gpu --devices 2",
            path(&binary("nodeplugins-sdk-bins", "example-device-plugin")),
            path(root.path())
        );
        if plugin_cdi {
            exec.push_str(&format!(" --cdi-dir {}", path(&cdi)));
        }
        let kubelet_dir = path(&root.path().join("device-plugins"));
        let cdi = path(&cdi);
        async move {
            conformance(&[
                "--kubelet-dir",
                &kubelet_dir,
                "--exec",
                &exec,
                "--cdi-dir",
                &cdi,
            ])
            .await
        }
    };
    let (code, report) = run(true).await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert!(
        with(&report, "PASS").contains("device.allocate.response"),
        "{report:#}"
    );
    assert_eq!(code, Some(0));
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cdi.join("example.com-gpu.json")).unwrap()).unwrap();
    assert_eq!(spec["kind"], "example.com/gpu", "{spec:#}");
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dev-0", "dev-1"], "{spec:#}");

    std::fs::remove_dir_all(&cdi).unwrap();
    let (code, report) = run(false).await;
    assert_eq!(
        with(&report, "FAIL"),
        ids(&["device.allocate.response"]),
        "{report:#}"
    );
    assert_eq!(code, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_dra_driver_passes_every_rule_restarts_included() {
    let root = tempfile::tempdir().unwrap();
    let claims = claims_file(root.path());
    // Its CDI specs written where the tool resolves its ids.
    let cdi = root.path().join("cdi");
    let exec = format!(
        "exec {} --root-dir {} --instance {{instance}} --cdi-dir {}",
        path(&binary("nodeplugins-sdk-bins", "example-dra-driver")),
        path(root.path()),
        path(&cdi)
    );
    let registry = root.path().join("plugins_registry");
    let (code, report) = conformance(&[
        "--registry",
        &path(&registry),
        "--exec",
        &exec,
        "--restarts",
        "--claims",
        &claims,
        "--cdi-dir",
        &path(&cdi),
    ])
    .await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    // No API server here to read slices from.
    assert_eq!(
        with(&report, "SKIP"),
        ids(&[
            "dra.slices.published",
            "dra.slices.pools-complete",
            "dra.slices.device-names"
        ]),
        "{report:#}"
    );
    assert_eq!(code, Some(0));
    assert_eq!(report["plugin_type"], "DRAPlugin");
    let cdi_ids = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "dra.prepare.cdi-ids")
        .unwrap();
    assert!(
        cdi_ids["detail"]
            .as_str()
            .unwrap()
            .contains("each named by a spec"),
        "{cdi_ids}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cdi_ids_no_spec_the_runtime_reads_names_fail_cdi_ids_and_only_it() {
    let root = tempfile::tempdir().unwrap();
    let claims = claims_file(root.path());
    // The driver writes its specs where the runtime (here: the tool) does
    // not look.
    let exec = format!(
        "exec {} --root-dir {} --cdi-dir {}",
        path(&binary("nodeplugins-sdk-bins", "example-dra-driver")),
        path(root.path()),
        path(&root.path().join("cdi-elsewhere"))
    );
    let (code, report) = conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec,
        "--claims",
        &claims,
        "--cdi-dir",
        &path(&root.path().join("cdi")),
    ])
    .await;
    assert_eq!(
        with(&report, "FAIL"),
        ids(&["dra.prepare.cdi-ids"]),
        "{report:#}"
    );
    assert_eq!(code, Some(1));
}

/// A run with `--kubeconfig` and `--restarts` against an API server where
/// claims `claim-a` and `claim-b` are allocated to `dra.example.com` on
/// node-1; `exec` makes the command line from the kubeconfig and a root.
async fn in_a_cluster(
    exec: impl Fn(&str, &std::path::Path) -> String,
) -> (Option<i32>, serde_json::Value) {
    let api = api_with_nodes("node-1", &["node-1"]).await;
    allocated_claim(&api, "claim-a", "node-1", "dra.example.com", "gpu-0").await;
    allocated_claim(&api, "claim-b", "node-1", "dra.example.com", "gpu-1").await;
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = path(&api.admin_kubeconfig());
    conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec(&kubeconfig, root.path()),
        "--kubeconfig",
        &kubeconfig,
        "--restarts",
    ])
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_dra_driver_in_a_cluster_passes_with_claims_from_the_api() {
    let (code, report) = in_a_cluster(|kubeconfig, root| {
        format!(
            "exec {} --root-dir {} --kubeconfig {kubeconfig} --node-name node-1 --instance {{instance}}",
            path(&binary("nodeplugins-sdk-bins", "example-dra-driver")),
            path(root)
        )
    })
    .await;
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(with(&report, "SKIP"), ids(&[]), "{report:#}");
    assert_eq!(code, Some(0));
    let by_uid = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "dra.prepare.by-uid")
        .unwrap();
    assert_eq!(by_uid["detail"], "2 claims answered by UID");
}

/// A ResourceSlice of `driver` in `pool` (of `count` slices at
/// generation 1) with `devices`, for node-2, as the driver's instance
/// there would leave it; the one under test, on node-1, leaves it alone.
async fn slice(
    api: &nodeplugins_test_support::kube_api::KubeApi,
    name: &str,
    driver: &str,
    pool: &str,
    count: i64,
    devices: &[&str],
) {
    let devices: Vec<serde_json::Value> = devices
        .iter()
        .map(|d| serde_json::json!({"name": d}))
        .collect();
    let slice = serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": "node-2",
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
            "devices": devices,
        },
    });
    api.admin(
        "POST",
        "/apis/resource.k8s.io/v1/resourceslices",
        Some(&slice),
    )
    .await;
}

/// The slices the scheduler reads beside the driver's own: a pool that
/// stays one slice short, and one whose two slices both hold `gpu-0`. Each
/// fails its own rule, after the start timeout for the short one.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_short_of_slices_and_a_device_named_twice_fail_their_slice_rules() {
    let api = api_with_nodes("node-1", &["node-1", "node-2"]).await;
    allocated_claim(&api, "claim-a", "node-1", "dra.example.com", "gpu-0").await;
    let driver = "dra.example.com";
    slice(&api, "short-1", driver, "short", 2, &["gpu-0"]).await;
    slice(&api, "twice-1", driver, "twice", 2, &["gpu-0", "gpu-1"]).await;
    slice(&api, "twice-2", driver, "twice", 2, &["gpu-0"]).await;
    // Another driver's slices are not this driver's.
    slice(&api, "other-1", "other.example.com", "other", 3, &["gpu-0"]).await;
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = path(&api.admin_kubeconfig());
    let exec = format!(
        "exec {} --root-dir {} --kubeconfig {kubeconfig} --node-name node-1",
        path(&binary("nodeplugins-sdk-bins", "example-dra-driver")),
        path(root.path())
    );
    let (code, report) = conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec,
        "--kubeconfig",
        &kubeconfig,
        "--rules",
        "dra.slices",
        "--restart-timeout",
        "5s",
    ])
    .await;
    assert_eq!(
        with(&report, "FAIL"),
        ids(&["dra.slices.device-names", "dra.slices.pools-complete"]),
        "{report:#}"
    );
    let detail = |id: &str| {
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == id)
            .map(|o| o["detail"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        detail("dra.slices.pools-complete").contains(r#"pool "short" generation 1: 1 of 2 slices"#),
        "{report:#}"
    );
    assert!(
        detail("dra.slices.device-names")
            .contains(r#"device "gpu-0" 2 times (slices twice-1, twice-2)"#),
        "{report:#}"
    );
    assert!(
        with(&report, "PASS").contains("dra.slices.published"),
        "{report:#}"
    );
    assert_eq!(code, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_stub_device_plugin_passes_with_a_warning_for_accepting_any_id() {
    let root = tempfile::tempdir().unwrap();
    let exec = format!(
        "exec {} --kubelet-sock {} --prestart --preferred --watch",
        path(&go_program("stub-device-plugin")),
        path(&root.path().join("kubelet.sock"))
    );
    let (code, report) = conformance(&[
        "--kubelet-dir",
        &path(root.path()),
        "--exec",
        &exec,
        "--restarts",
    ])
    .await;
    // The stub's Allocate answers for whatever ids it is given
    // (pkg/kubelet/cm/devicemanager/plugin/v1beta1/stub.go, Allocate: it
    // builds a response per container request without looking the ids
    // up): the kubelet never sends an id the plugin did not list, so
    // upstream does not test it, and the kubelet works with the stub.
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(
        with(&report, "WARN"),
        ids(&["device.allocate.unknown-ids"]),
        "{report:#}"
    );
    assert_eq!(code, Some(0), "a WARN does not fail the run");
}

/// `sample-device-plugin` (k8s.io/kubernetes/test/images/sample-device-plugin)
/// as the tool's `--exec`: it registers on and serves in the fixed
/// `/var/lib/kubelet/device-plugins`, so it runs in a user and mount
/// namespace of its own where that directory is `dir`, and `/tmp`, where
/// its Allocate writes a file per device, a tmpfs of its own (the program
/// itself is bound under `/var/lib` first: it may live under `/tmp`).
fn sample_device_plugin(dir: &std::path::Path) -> String {
    let inside = format!(
        "mount -t tmpfs tmpfs /var/lib && mkdir -p /var/lib/kubelet/device-plugins && mount --bind {} /var/lib/kubelet/device-plugins && touch /var/lib/sample-device-plugin && mount --bind {} /var/lib/sample-device-plugin && mount -t tmpfs tmpfs /tmp && exec /var/lib/sample-device-plugin",
        path(dir),
        path(&go_program("sample-device-plugin"))
    );
    format!(
        "mkdir -p {} && exec unshare --user --map-root-user --mount sh -c '{inside}'",
        path(dir)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_sample_device_plugin_passes_every_rule_it_offers() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("device-plugins");
    let (code, report) = conformance(&[
        "--kubelet-dir",
        &path(&dir),
        "--exec",
        &sample_device_plugin(&dir),
        "--restarts",
    ])
    .await;
    assert_eq!(report["plugin"], "example.com/resource", "{report:#}");
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(with(&report, "WARN"), ids(&[]), "{report:#}");
    // It offers neither GetPreferredAllocation nor PreStartContainer.
    assert_eq!(
        with(&report, "SKIP"),
        ids(&["device.preferred-allocation", "device.pre-start-container"]),
        "{report:#}"
    );
    assert_eq!(code, Some(0));
}

/// No FAIL, and one WARN: the Go helper's failing a whole batch for the
/// claim it cannot read.
fn warns_only_for_failing_a_whole_batch(report: &serde_json::Value) {
    assert_eq!(with(report, "FAIL"), ids(&[]), "{report:#}");
    assert_eq!(
        with(report, "WARN"),
        ids(&["dra.prepare.per-claim-errors"]),
        "{report:#}"
    );
    let warned = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "dra.prepare.per-claim-errors")
        .unwrap();
    let detail = warned["detail"].as_str().unwrap();
    assert!(detail.contains("get resource claims"), "{detail}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dra_driver_on_the_go_helper_passes_with_a_warning_for_failing_a_whole_batch_for_one_claim()
 {
    let root = tempfile::tempdir().unwrap();
    let claims = claims_file(root.path());
    let exec = format!(
        "exec {} --instance {{instance}} --registry-dir {} --plugin-dir {} --claims default/claim-a/0b7e6e1a-0000-4000-8000-000000000001,default/claim-b/0b7e6e1a-0000-4000-8000-000000000002",
        path(&go_program("dra-driver")),
        path(&root.path().join("plugins_registry")),
        path(&root.path().join("plugins/gpu.go.example.com")),
    );
    let (code, report) = conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &exec,
        "--claims",
        &claims,
        "--restarts",
    ])
    .await;
    // The helper reads every claim of a batch before calling the driver,
    // and a claim it cannot read fails the whole call
    // (k8s.io/dynamic-resource-allocation v0.37.2,
    // kubeletplugin/draplugin.go:1293-1296, NodePrepareResources:
    // `return nil, fmt.Errorf("get resource claims: %w", err)`), so the
    // batch's other claims are not prepared either. The kubelet then fails
    // the pod's prepare as a whole, so upstream sees no difference: a
    // WARN, not a failure.
    warns_only_for_failing_a_whole_batch(&report);
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_helper_gpu_driver_in_a_cluster_passes_with_a_warning_for_failing_a_whole_batch() {
    let (code, report) = in_a_cluster(|kubeconfig, root| {
        format!(
            "NODE_NAME=node-1 KUBECONFIG={kubeconfig} exec {} {} {}",
            path(&go_program("gpu-driver")),
            path(root),
            path(&root.join("cdi"))
        )
    })
    .await;
    // As for dra-driver: the helper fails the whole batch when one claim
    // (here the missing one the tool adds) cannot be read: a WARN.
    warns_only_for_failing_a_whole_batch(&report);
    // It has no instance flag: the rolling-update rule cannot start a
    // second one.
    assert_eq!(
        with(&report, "SKIP"),
        ids(&["registration.second-instance"]),
        "{report:#}"
    );
    assert_eq!(code, Some(0));
}

/// The SDK's example CSI driver with `node_id` and the CSI registrar, as
/// one `--exec` (a node plugin pod's two containers), for `root`.
fn csi_driver_and_registrar(root: &std::path::Path, node_id: &str) -> String {
    let socket = root.join("plugins/csi.example.com/csi.sock");
    format!(
        "{} --endpoint=unix://{socket} --node-id={node_id} & exec {} --csi-address={socket} --kubelet-registration-path={socket} --plugin-registration-path={}",
        path(&binary("nodeplugins-sdk-bins", "example-csi-driver")),
        path(&binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar")),
        path(&root.join("plugins_registry")),
        socket = path(&socket),
    )
}

/// The verdicts for the example CSI driver with `node_id`.
async fn csi_verdicts(node_id: &str) -> (Option<i32>, serde_json::Value) {
    let root = tempfile::tempdir().unwrap();
    conformance(&[
        "--registry",
        &path(&root.path().join("plugins_registry")),
        "--exec",
        &csi_driver_and_registrar(root.path(), node_id),
        "--restarts",
    ])
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_example_csi_driver_with_its_registrar_passes_with_a_warning_for_exiting_on_rejection()
 {
    let (code, report) = csi_verdicts("node-1").await;
    assert_eq!(report["plugin_type"], "CSIPlugin", "{report:#}");
    assert_eq!(with(&report, "FAIL"), ids(&[]), "{report:#}");
    // The registrar exits when the kubelet refuses the driver, as
    // node-driver-registrar does, for its pod to restart it.
    assert_eq!(
        with(&report, "WARN"),
        ids(&["registration.survives-rejection"]),
        "{report:#}"
    );
    assert!(with(&report, "PASS").contains("csi.node-get-info"));
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csi_driver_without_a_node_id_fails_node_get_info_and_only_it() {
    let (code, report) = csi_verdicts("").await;
    assert_eq!(
        with(&report, "FAIL"),
        ids(&["csi.node-get-info"]),
        "{report:#}"
    );
    assert_eq!(code, Some(1));
}

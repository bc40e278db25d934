//! Monitoring clients (the kubelet's Go client, grpcio, the CLI) see each
//! container's devices and claims, and the same again after an agent restart.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};

use super::common::{self, agent, cli, resource_when, signal};
use super::{RESOURCE, check_list, cli_json, device_plugin, dra_driver, metric, socket, train_pod};

#[tokio::test(flavor = "multi_thread")]
async fn monitoring_clients_see_each_containers_devices_and_claims_and_again_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let mut agent = agent(root.path());
    let _plugin = device_plugin(root.path());
    let _driver = dra_driver(root.path());
    let (devices, claim) = train_pod(root.path()).await;
    let socket = socket(root.path());

    // Private unless configured otherwise.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);

    // The kubelet's own client.
    let mut go = GoProcess::start(
        "podresources-client",
        ["--socket", socket.to_str().unwrap()],
    );
    go.event(TIMEOUT, "started", |_| true).await;
    let list = go.request(TIMEOUT, "list", json!({})).await;
    assert_eq!(list["error"], "", "{list}");
    check_list(&list["response"], &devices, &claim);
    let got = go
        .request(TIMEOUT, "get", json!({"namespace": "ml", "name": "train"}))
        .await;
    assert_eq!(
        got["response"]["pod_resources"],
        list["response"]["pod_resources"][0]
    );
    let missing = go
        .request(TIMEOUT, "get", json!({"namespace": "ml", "name": "nope"}))
        .await;
    assert_eq!(missing["code"], "Unknown", "{missing}");
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .ends_with("pod nope in namespace ml not found"),
        "{missing}"
    );
    let allocatable = go.request(TIMEOUT, "allocatable", json!({})).await;
    let mut all: Vec<(String, i64)> = allocatable["response"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let id = d["device_ids"][0].as_str().unwrap().to_string();
            (id, d["topology"]["nodes"][0]["ID"].as_i64().unwrap_or(0))
        })
        .collect();
    all.sort();
    let want: Vec<(String, i64)> = (0..4).map(|i| (format!("dev-{i}"), i % 2)).collect();
    assert_eq!(all, want, "every healthy device, allocated or not");
    let alpha = go.request(TIMEOUT, "list_v1alpha1", json!({})).await;
    let alpha_devices = &alpha["response"]["pod_resources"][0]["containers"][0]["devices"];
    assert_eq!(alpha_devices.as_array().unwrap().len(), 2, "{alpha}");

    // grpcio from our .proto files, with a path-valued :authority.
    let out = python_env()
        .script("pod_resources_client.py")
        .arg(&socket)
        .arg("--authority")
        .arg(&socket)
        .args(["--get", "ml/train", "--get", "ml/nope"])
        .output()
        .await
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{}", String::from_utf8_lossy(&out.stderr));
    let py_list = &lines[0]["response"];
    let py_pod = &py_list["pod_resources"][0];
    assert_eq!(
        (&py_pod["namespace"], &py_pod["name"]),
        (&json!("ml"), &json!("train"))
    );
    assert_eq!(
        py_pod["containers"][0]["devices"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        py_pod["containers"][1]["dynamic_resources"][0]["claim_resources"][0]["cdi_devices"],
        json!([{"name": claim.1}])
    );
    assert_eq!(
        lines[1]["response"]["pod_resources"], *py_pod,
        "Get as List"
    );
    assert_eq!(lines[2]["code"], "UNKNOWN");
    assert_eq!(lines[2]["details"], "pod nope in namespace ml not found");
    assert_eq!(lines[3]["response"]["devices"].as_array().unwrap().len(), 4);
    assert_eq!(lines[4]["response"]["pod_resources"][0]["name"], "train");
    assert_eq!(
        metric(
            root.path(),
            r#"kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"}"#
        )
        .await,
        2,
        "each Get of an unknown pod counts, as the kubelet counts it"
    );

    // The command line.
    let printed = cli_json(root.path(), &["pod-resources"]).await;
    check_list(&printed, &devices, &claim);
    let table = cli(root.path(), &["pod-resources"]).await;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("NAMESPACE"), "{table}");
    assert!(table.contains(&claim.1), "{table}");
    let one = cli_json(root.path(), &["pod-resources", "--pod", "ml/train"]).await;
    assert!(one["pod_resources"].is_object(), "Get's shape: {one:#}");
    check_list(
        &json!({"pod_resources": [one["pod_resources"]]}),
        &devices,
        &claim,
    );
    let printed = cli_json(root.path(), &["pod-resources", "--allocatable"]).await;
    assert_eq!(printed["devices"].as_array().unwrap().len(), 4);

    // Restarted: the same answers, from the checkpoints, from the first
    // call on (the server answers once both managers have read theirs).
    signal(&agent, "-TERM").await;
    assert_eq!(agent.wait(TIMEOUT).await, Some(0));
    go.close_stdin();
    agent = common::agent(root.path());
    // Served once it accepts a connection (the file shows between the
    // socket's bind and its listen).
    eventually("the socket served again", TIMEOUT, || async {
        std::os::unix::net::UnixStream::connect(&socket)
            .is_ok()
            .then_some(())
    })
    .await;
    let mut go = GoProcess::start(
        "podresources-client",
        ["--socket", socket.to_str().unwrap()],
    );
    go.event(TIMEOUT, "started", |_| true).await;
    let again = go.request(TIMEOUT, "list", json!({})).await;
    assert_eq!(again["error"], "", "{again}");
    assert_eq!(again["response"], list["response"]);
    let got_again = go
        .request(TIMEOUT, "get", json!({"namespace": "ml", "name": "train"}))
        .await;
    assert_eq!(got_again["error"], "", "{got_again}");
    assert_eq!(got_again["response"], got["response"], "Get as before");
    // Allocatable devices come from the plugin, which registers again.
    resource_when(root.path(), RESOURCE, |r| r["allocatable"] == 4).await;
    let allocatable_again = go.request(TIMEOUT, "allocatable", json!({})).await;
    assert_eq!(
        allocatable_again["response"], allocatable["response"],
        "GetAllocatableResources as before"
    );
    assert_eq!(allocatable_again["error"], "", "{allocatable_again}");
    drop(agent);
}

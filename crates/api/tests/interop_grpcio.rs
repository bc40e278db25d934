//! Interop with an independent gRPC stack: Python grpcio (and hand-built
//! HTTP/2 frames from the Python `hpack`/`hyperframe` packages) against our
//! servers, and our client against a grpcio server. Stubs are generated from
//! our own `.proto` files, so these tests also prove the wire format.
// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use nodeplugins_api::deviceplugin::v1beta1::DevicePluginOptions;
use nodeplugins_api::pluginregistration::v1::PluginInfo;
use nodeplugins_api::pluginregistration::v1::RegistrationStatus;
use nodeplugins_api::transport::{BoundSocket, serve};
use nodeplugins_test_support::fake_device_plugin::{FakeDevicePlugin, device_plugin_service};
use nodeplugins_test_support::fake_kubelet;
use nodeplugins_test_support::fake_plugin::registration_service;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, watch_until};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const PLUGIN_NAME: &str = "interop.example.com";

fn info() -> PluginInfo {
    PluginInfo {
        r#type: "DevicePlugin".into(),
        name: PLUGIN_NAME.into(),
        endpoint: String::new(),
        supported_versions: vec!["v1beta1".into()],
    }
}

/// Serves Registration and DevicePlugin on one socket, through our transport
/// when `ours` is true, or on a stock tonic server otherwise.
async fn start_server(
    socket: &Path,
    ours: bool,
) -> (CancellationToken, watch::Receiver<Vec<RegistrationStatus>>) {
    let (registration, notifications) = registration_service(info());
    let (devices, updates) =
        device_plugin_service(DevicePluginOptions::default(), FakeDevicePlugin::devices(2));
    let router = tonic::transport::Server::builder()
        .add_service(registration)
        .add_service(devices);
    let shutdown = CancellationToken::new();
    if ours {
        let bound = BoundSocket::bind(socket, None).await.unwrap();
        tokio::spawn(serve(bound, router, shutdown.clone()));
    } else {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        tokio::spawn(
            router.serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned()),
        );
    }
    // Keep the device list changing so every ListAndWatch stream carries
    // several messages.
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_millis(20));
        for n in 0usize.. {
            tokio::select! {
                _ = ticks.tick() => updates.send_replace(FakeDevicePlugin::devices(1 + n % 3)),
                () = stop.cancelled() => return,
            };
        }
    });
    (shutdown, notifications)
}

async fn run_grpc_client(socket: &Path, authority: Option<&str>) -> (Option<i32>, Vec<String>) {
    let mut command = python_env().script("grpc_client.py");
    command.arg(socket);
    if let Some(authority) = authority {
        command.args(["--authority", authority]);
    }
    let mut client = ChildProcess::spawn("grpc_client.py", command);
    client.wait_for_line(TIMEOUT, |l| l == "DONE").await;
    let code = client.wait(TIMEOUT).await;
    (code, client.output().to_vec())
}

fn calls(output: &[String], call: &str) -> usize {
    output
        .iter()
        .filter(|l| l.contains(&format!("\"call\": \"{call}\"")) && l.contains("\"ok\": true"))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcio_client_with_path_authority_gets_ok_for_unary_and_streaming_calls() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let (_shutdown, mut notifications) = start_server(&socket, true).await;
    let authority = socket.to_str().unwrap().trim_start_matches('/').to_string();

    let (code, output) = run_grpc_client(&socket, Some(&authority)).await;

    assert_eq!(code, Some(0), "client output:\n{}", output.join("\n"));
    assert_eq!(calls(&output, "GetInfo"), 3);
    assert_eq!(calls(&output, "NotifyRegistrationStatus"), 3);
    assert_eq!(calls(&output, "GetDevicePluginOptions"), 3);
    assert_eq!(calls(&output, "ListAndWatch"), 6);
    assert!(output.iter().any(|l| l.contains(PLUGIN_NAME)));
    watch_until("three notifications", &mut notifications, TIMEOUT, |n| {
        n.len() == 3
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcio_client_with_leading_slash_path_authority_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let (_shutdown, _) = start_server(&socket, true).await;
    let (code, output) = run_grpc_client(&socket, Some(socket.to_str().unwrap())).await;
    assert_eq!(code, Some(0), "client output:\n{}", output.join("\n"));
    assert_eq!(calls(&output, "ListAndWatch"), 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcio_client_with_default_authority_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let (_shutdown, _) = start_server(&socket, true).await;
    let (code, output) = run_grpc_client(&socket, None).await;
    assert_eq!(code, Some(0), "client output:\n{}", output.join("\n"));
    assert_eq!(calls(&output, "GetInfo"), 3);
}

/// The control: a stock tonic server rejects the same client, so the tests
/// above really exercise the authority layer.
#[tokio::test(flavor = "multi_thread")]
async fn stock_tonic_server_rejects_a_path_authority() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let (_shutdown, _) = start_server(&socket, false).await;
    let authority = socket.to_str().unwrap().trim_start_matches('/').to_string();
    let (code, output) = run_grpc_client(&socket, Some(&authority)).await;
    assert_eq!(code, Some(1), "client output:\n{}", output.join("\n"));
    assert_eq!(calls(&output, "GetInfo"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn hand_built_http2_frames_with_path_authority_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let (_shutdown, _) = start_server(&socket, true).await;
    let mut command = python_env().script("raw_h2_client.py");
    command.arg(&socket).args([
        "--authority",
        socket.to_str().unwrap(),
        "--expect-name",
        PLUGIN_NAME,
    ]);
    let mut client = ChildProcess::spawn("raw_h2_client.py", command);
    client.wait_for_line(TIMEOUT, |l| l == "DONE").await;
    let code = client.wait(TIMEOUT).await;
    let scenarios: Vec<&String> = client
        .output()
        .iter()
        .filter(|l| l.contains("\"scenario\""))
        .collect();
    assert_eq!(
        scenarios.len(),
        7,
        "output:\n{}",
        client.output().join("\n")
    );
    assert_eq!(code, Some(0), "output:\n{}", client.output().join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn our_client_registers_a_grpcio_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python-reg.sock");
    let mut command = python_env().script("registration_server.py");
    command.arg(&socket).args([
        "--type",
        "CSIPlugin",
        "--name",
        "python.example.com",
        "--versions",
        "1.0.0,1.1.0",
    ]);
    let mut plugin = ChildProcess::spawn("registration_server.py", command);
    plugin.wait_for_line(TIMEOUT, |l| l == "READY").await;

    let info = fake_kubelet::get_info(&socket).await.unwrap();
    assert_eq!(info.r#type, "CSIPlugin");
    assert_eq!(info.name, "python.example.com");
    assert_eq!(info.supported_versions, vec!["1.0.0", "1.1.0"]);

    fake_kubelet::notify(&socket, false, "validation failed: test")
        .await
        .unwrap();
    let line = plugin
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY"))
        .await;
    assert_eq!(
        line,
        r#"NOTIFY {"registered": false, "error": "validation failed: test"}"#
    );
    fake_kubelet::notify(&socket, true, "").await.unwrap();
    let line = plugin
        .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY"))
        .await;
    assert_eq!(line, r#"NOTIFY {"registered": true, "error": ""}"#);
}

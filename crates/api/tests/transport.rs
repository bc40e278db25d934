//! The Unix-socket transport with real sockets: binding hygiene, serving,
//! dialing and shutdown.
// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::time::Duration;

use nodeplugins_api::deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use nodeplugins_api::deviceplugin::v1beta1::{DevicePluginOptions, Empty};
use nodeplugins_api::pluginregistration::v1::registration_client::RegistrationClient;
use nodeplugins_api::pluginregistration::v1::{InfoRequest, PluginInfo};
use nodeplugins_api::transport::{
    BoundSocket, MAX_SOCKET_PATH_LEN, SHUTDOWN_GRACE, TransportError, dial, dial_lazy, serve,
};
use nodeplugins_test_support::fake_device_plugin::{FakeDevicePlugin, device_plugin_service};
use nodeplugins_test_support::fake_plugin::{FakePlugin, registration_service};
use nodeplugins_test_support::wait::TIMEOUT;
use tokio_util::sync::CancellationToken;

fn info(name: &str) -> PluginInfo {
    PluginInfo {
        r#type: "CSIPlugin".into(),
        name: name.into(),
        endpoint: String::new(),
        supported_versions: vec![],
    }
}

#[tokio::test]
async fn bind_refuses_a_path_longer_than_sun_path() {
    let dir = tempfile::tempdir().unwrap();
    let name = "x".repeat(MAX_SOCKET_PATH_LEN);
    let path = dir.path().join(name);
    let err = BoundSocket::bind(&path, None).await.unwrap_err();
    assert!(
        matches!(err, TransportError::PathTooLong { max: 107, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("the limit is 107 bytes"), "{err}");
    assert!(!path.exists());
}

#[tokio::test]
async fn bind_accepts_a_path_of_exactly_107_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().as_os_str().len() + 1;
    let path = dir.path().join("s".repeat(MAX_SOCKET_PATH_LEN - prefix));
    assert_eq!(path.as_os_str().len(), MAX_SOCKET_PATH_LEN);
    let bound = BoundSocket::bind(&path, None).await.unwrap();
    assert!(
        std::fs::symlink_metadata(bound.path())
            .unwrap()
            .file_type()
            .is_socket()
    );
}

#[tokio::test]
async fn bind_replaces_a_stale_socket_with_no_listener() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(
        path.exists(),
        "a dropped std listener leaves its file behind"
    );
    let bound = BoundSocket::bind(&path, Some(0o600)).await.unwrap();
    assert_eq!(bound.path(), path);
}

#[tokio::test]
async fn bind_refuses_to_replace_a_live_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.sock");
    let _live = BoundSocket::bind(&path, None).await.unwrap();
    let err = BoundSocket::bind(&path, None).await.unwrap_err();
    assert!(matches!(err, TransportError::InUse { .. }), "{err}");
}

#[tokio::test]
async fn bind_refuses_to_replace_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.sock");
    std::fs::write(&path, b"precious").unwrap();
    let err = BoundSocket::bind(&path, None).await.unwrap_err();
    assert!(matches!(err, TransportError::NotASocket { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[tokio::test]
async fn bind_sets_the_requested_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.sock");
    let _bound = BoundSocket::bind(&path, Some(0o600)).await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[tokio::test]
async fn dropping_the_socket_removes_its_file_but_not_a_successors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugin.sock");
    let first = BoundSocket::bind(&path, None).await.unwrap();
    drop(first);
    assert!(!path.exists());

    // A successor replaces the file while the old guard is still alive.
    let old = BoundSocket::bind(&path, None).await.unwrap();
    std::fs::remove_file(&path).unwrap();
    let successor = BoundSocket::bind(&path, None).await.unwrap();
    drop(old);
    assert!(
        path.exists(),
        "the old server must not remove its successor's socket"
    );
    drop(successor);
    assert!(!path.exists());
}

#[tokio::test]
async fn served_socket_answers_and_is_removed_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reg.sock");
    let plugin = FakePlugin::builder("CSIPlugin", "a.example.com")
        .serve(&path)
        .await;
    let channel = dial(&path, Duration::from_secs(5)).await.unwrap();
    let got = RegistrationClient::new(channel)
        .get_info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.name, "a.example.com");
    plugin.stop().await;
    assert!(!path.exists());
}

#[tokio::test]
async fn shutdown_closes_open_streams_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dp.sock");
    let (service, _updates) =
        device_plugin_service(DevicePluginOptions::default(), FakeDevicePlugin::devices(1));
    let shutdown = CancellationToken::new();
    let bound = BoundSocket::bind(&path, None).await.unwrap();
    let server = tokio::spawn(serve(
        bound,
        tonic::transport::Server::builder().add_service(service),
        shutdown.clone(),
    ));
    let channel = dial(&path, Duration::from_secs(5)).await.unwrap();
    let mut stream = DevicePluginClient::new(channel)
        .list_and_watch(Empty {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().devices.len(), 1);

    shutdown.cancel();
    let ended = tokio::time::timeout(SHUTDOWN_GRACE + TIMEOUT, stream.message()).await;
    assert!(
        !matches!(ended, Ok(Ok(Some(_)))),
        "the stream must end, got {ended:?}"
    );
    tokio::time::timeout(TIMEOUT, server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!path.exists());
}

#[tokio::test]
async fn dial_fails_promptly_when_nothing_listens() {
    let dir = tempfile::tempdir().unwrap();
    let err = dial(dir.path().join("missing.sock"), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Dial { .. }), "{err}");
}

#[tokio::test]
async fn lazy_channel_connects_once_the_server_appears() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("later.sock");
    let channel = dial_lazy(&path, Duration::from_secs(1)).unwrap();
    let mut client = RegistrationClient::new(channel);
    assert!(client.get_info(InfoRequest {}).await.is_err());
    let (service, _) = registration_service(info("late.example.com"));
    let bound = BoundSocket::bind(&path, None).await.unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(serve(
        bound,
        tonic::transport::Server::builder().add_service(service),
        shutdown.clone(),
    ));
    let got = client.get_info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(got.name, "late.example.com");
    shutdown.cancel();
}

#[tokio::test]
async fn many_requests_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reg.sock");
    let _plugin = FakePlugin::builder("DRAPlugin", "dra.example.com")
        .serve(&path)
        .await;
    let channel = dial(&path, Duration::from_secs(5)).await.unwrap();
    let calls = (0..50).map(|_| {
        let mut client = RegistrationClient::new(channel.clone());
        async move {
            client
                .get_info(InfoRequest {})
                .await
                .map(|r| r.into_inner().name)
        }
    });
    for name in futures::future::join_all(calls).await {
        assert_eq!(name.unwrap(), "dra.example.com");
    }
}

#[tokio::test]
async fn unary_calls_answer_with_the_message_or_the_servers_status() {
    use nodeplugins_api::pluginregistration::v1::{RegistrationStatus, RegistrationStatusResponse};
    use nodeplugins_api::transport::UnaryConnection;
    use nodeplugins_test_support::fake_plugin::GetInfoBehaviour;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reg.sock");
    let plugin = FakePlugin::builder("CSIPlugin", "u.example.com")
        .serve(&path)
        .await;
    let mut connection = UnaryConnection::connect(&path, Duration::from_secs(5))
        .await
        .unwrap();
    let got: PluginInfo = connection
        .call("/pluginregistration.Registration/GetInfo", &InfoRequest {})
        .await
        .unwrap();
    assert_eq!(got.name, "u.example.com");
    // A second call on the same connection.
    let status = RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    };
    let _: RegistrationStatusResponse = connection
        .call(
            "/pluginregistration.Registration/NotifyRegistrationStatus",
            &status,
        )
        .await
        .unwrap();
    assert_eq!(plugin.notifications().borrow().len(), 1);
    // An unknown method: the server's status, not a transport error.
    let unknown = connection
        .call::<_, PluginInfo>("/pluginregistration.Registration/Nope", &InfoRequest {})
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::Unimplemented, "{unknown:?}");
    plugin.stop().await;

    // A server that fails the call.
    let failing = FakePlugin::builder("CSIPlugin", "f.example.com")
        .get_info(GetInfoBehaviour::Fail("out of order".into()))
        .serve(&path)
        .await;
    let mut connection = UnaryConnection::connect(&path, Duration::from_secs(5))
        .await
        .unwrap();
    let failed = connection
        .call::<_, PluginInfo>("/pluginregistration.Registration/GetInfo", &InfoRequest {})
        .await
        .unwrap_err();
    assert_eq!(failed.message(), "out of order", "the server's own status");
    // The server goes away: the next call says so.
    failing.stop().await;
    let gone = connection
        .call::<_, PluginInfo>("/pluginregistration.Registration/GetInfo", &InfoRequest {})
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::Unavailable, "{gone:?}");
}

#[tokio::test]
async fn unary_connect_fails_promptly_when_nothing_listens() {
    let dir = tempfile::tempdir().unwrap();
    let err = nodeplugins_api::transport::UnaryConnection::connect(
        dir.path().join("missing.sock"),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err}");
}

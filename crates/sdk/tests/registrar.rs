//! The SDK registrar against the kubelet's side of the protocol, over real sockets.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodeplugins_sdk::registrar::{
    PluginRegistration, Registrar, RegistrarError, RegistrationState,
};
use nodeplugins_test_support::fake_kubelet;
use nodeplugins_test_support::wait::{TIMEOUT, eventually, watch_until};
use tokio_util::sync::CancellationToken;

fn info() -> PluginRegistration {
    PluginRegistration {
        plugin_type: "DRAPlugin".into(),
        name: "gpu.example.com".into(),
        endpoint: "/var/lib/kubelet/plugins/gpu.example.com/dra.sock".into(),
        versions: vec!["v1.DRAPlugin".into(), "v1beta1.DRAPlugin".into()],
    }
}

#[tokio::test]
async fn serves_get_info_on_the_default_socket_and_reports_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let registrar = Registrar::builder(info())
        .registry_dir(dir.path())
        .start(CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        registrar.socket(),
        dir.path().join("gpu.example.com-reg.sock")
    );
    let got = fake_kubelet::get_info(registrar.socket()).await.unwrap();
    assert_eq!(got.r#type, "DRAPlugin");
    assert_eq!(got.name, "gpu.example.com");
    assert_eq!(
        got.endpoint,
        "/var/lib/kubelet/plugins/gpu.example.com/dra.sock"
    );
    assert_eq!(
        got.supported_versions,
        ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    );

    let mut state = registrar.state();
    assert_eq!(*state.borrow(), RegistrationState::Pending);
    fake_kubelet::notify(
        registrar.socket(),
        false,
        "RegisterPlugin error -- plugin validation failed",
    )
    .await
    .unwrap();
    let rejected = watch_until("rejection", &mut state, TIMEOUT, |s| {
        matches!(s, RegistrationState::Rejected(_))
    })
    .await;
    assert_eq!(
        rejected,
        RegistrationState::Rejected("RegisterPlugin error -- plugin validation failed".into())
    );
    fake_kubelet::notify(registrar.socket(), true, "")
        .await
        .unwrap();
    watch_until("registration", &mut state, TIMEOUT, |s| {
        *s == RegistrationState::Registered
    })
    .await;

    let socket = registrar.socket().to_owned();
    registrar.stop().await.unwrap();
    assert!(!socket.exists(), "the socket is removed on shutdown");
}

#[tokio::test]
async fn replaces_a_stale_socket_of_its_own_name_but_not_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.example.com-reg.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    // Stale once nothing answers on it: a process another test starts at
    // this moment holds a copy of the listener until its exec closes it.
    let refused = || {
        std::os::unix::net::UnixStream::connect(&path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
    };
    eventually("the dropped listener refusing", TIMEOUT, || async {
        refused().then_some(())
    })
    .await;
    let first = Registrar::builder(info())
        .registry_dir(dir.path())
        .start(CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        fake_kubelet::get_info(&path).await.unwrap().name,
        "gpu.example.com"
    );
    let second = Registrar::builder(info())
        .registry_dir(dir.path())
        .start(CancellationToken::new())
        .await;
    assert!(
        matches!(second, Err(RegistrarError::Transport(_))),
        "a live socket is never taken over"
    );
    first.stop().await.unwrap();
}

#[tokio::test]
async fn rolling_update_instances_get_their_own_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let a = Registrar::builder(info())
        .registry_dir(dir.path())
        .rolling_update("uid-a")
        .start(CancellationToken::new())
        .await
        .unwrap();
    let b = Registrar::builder(info())
        .registry_dir(dir.path())
        .rolling_update("uid-b")
        .start(CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        a.socket(),
        dir.path().join("gpu.example.com-uid-a-reg.sock")
    );
    assert_ne!(a.socket(), b.socket());
    assert_eq!(
        fake_kubelet::get_info(b.socket()).await.unwrap().name,
        "gpu.example.com"
    );
    let both = Registrar::builder(info())
        .socket_name("x.sock")
        .rolling_update("u")
        .socket_path();
    assert!(matches!(both, Err(RegistrarError::ConflictingNames)));
}

#[tokio::test]
async fn shutdown_token_stops_the_registrar_and_removes_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let registrar = Registrar::builder(info())
        .registry_dir(dir.path())
        .start(shutdown.clone())
        .await
        .unwrap();
    let socket = registrar.socket().to_owned();
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, registrar.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!socket.exists());
}

/// The real kubelet dials registration sockets with the socket path as
/// `:authority`; hand-built HTTP/2 requests doing that must be answered.
#[tokio::test(flavor = "multi_thread")]
async fn answers_get_info_sent_with_a_path_valued_authority() {
    use nodeplugins_test_support::process::ChildProcess;
    use nodeplugins_test_support::python::python_env;

    let dir = tempfile::tempdir().unwrap();
    let registrar = Registrar::builder(info())
        .registry_dir(dir.path())
        .start(CancellationToken::new())
        .await
        .unwrap();
    let mut command = python_env().script("raw_h2_client.py");
    command.arg(registrar.socket()).args([
        "--authority",
        registrar.socket().to_str().unwrap(),
        "--expect-name",
        "gpu.example.com",
    ]);
    let mut client = ChildProcess::spawn("raw_h2_client.py", command);
    client.wait_for_line(TIMEOUT, |l| l == "DONE").await;
    assert_eq!(
        client.wait(TIMEOUT).await,
        Some(0),
        "{}",
        client.output().join("\n")
    );
}

/// Collects the names and fields of the spans made.
#[derive(Clone, Default)]
struct Spans(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={:?}", field.name(), value));
            }
        }
        let mut fields = Fields(attrs.metadata().name().to_string());
        attrs.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
}

#[tokio::test]
async fn a_served_call_runs_in_a_span_naming_its_server_and_method() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let registrar = Registrar::builder(info())
        .registry_dir(dir.path())
        .start(CancellationToken::new())
        .await
        .unwrap();
    fake_kubelet::get_info(registrar.socket()).await.unwrap();
    let want = format!(
        "grpc_call server={} method=/pluginregistration.Registration/GetInfo",
        registrar.socket().display()
    );
    registrar.stop().await.unwrap();
    let spans = spans.0.lock().unwrap().clone();
    assert!(spans.contains(&want), "{want} not among {spans:?}");
}

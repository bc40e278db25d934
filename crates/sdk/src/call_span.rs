//! The span every call a plugin serves runs in: the same for the
//! registration, device plugin, DRA and CSI servers, naming the socket (or
//! driver) that serves it and the gRPC method, so that what a handler logs
//! says which call of which server it belongs to without fields of its own.

use std::fmt::Display;

use tonic::transport::Server;

/// A server builder whose every call runs in a `grpc_call` span with
/// `server` (the socket path, or the driver for a router served elsewhere)
/// and the call's `method` (its `/package.Service/Method` path).
pub(crate) fn server(server: impl Display) -> Server {
    let server = server.to_string();
    Server::builder().trace_fn(move |request| {
        tracing::info_span!(
            "grpc_call",
            server = %server,
            method = %request.uri().path()
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::{Arc, Mutex};

    use tracing::Subscriber;
    use tracing::span::{Attributes, Id};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    /// Collects the names and fields of the spans made.
    #[derive(Clone, Default)]
    struct Spans(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Spans {
        fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
            struct Fields(String);
            impl tracing::field::Visit for Fields {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    self.0.push_str(&format!(" {}={:?}", field.name(), value));
                }
            }
            let mut fields = Fields(attrs.metadata().name().to_string());
            attrs.record(&mut fields);
            if let Ok(mut spans) = self.0.lock() {
                spans.push(fields.0);
            }
        }
    }

    #[tokio::test]
    async fn a_served_call_runs_in_a_span_naming_its_server_and_method() {
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry().with(spans.clone());
        let _default = tracing::subscriber::set_default(subscriber);

        let dir = tempfile::tempdir().unwrap();
        let registrar =
            crate::registrar::Registrar::builder(crate::registrar::PluginRegistration {
                plugin_type: "DRAPlugin".into(),
                name: "gpu.example.com".into(),
                endpoint: "/var/lib/kubelet/plugins/gpu.example.com/dra.sock".into(),
                versions: vec!["v1.DRAPlugin".into()],
            })
            .registry_dir(dir.path())
            .start(tokio_util::sync::CancellationToken::new())
            .await
            .unwrap();
        nodeplugins_test_support::fake_kubelet::get_info(registrar.socket())
            .await
            .unwrap();
        let want = format!(
            "grpc_call server={} method=/pluginregistration.Registration/GetInfo",
            registrar.socket().display()
        );
        registrar.stop().await.unwrap();

        let spans = spans.0.lock().unwrap().clone();
        assert!(spans.contains(&want), "{want} not among {spans:?}");
    }
}

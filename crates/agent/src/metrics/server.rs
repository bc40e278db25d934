//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the
//! agent runs) and `/readyz` (the plugins present at start-up have been
//! picked up).

use std::convert::Infallible;
use std::fmt::Write;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::family::labels;
use crate::device::DeviceManager;
use crate::dra::DraManager;
use crate::registry::{PluginState, RegistryHandle};

/// Where the endpoint reads what it reports.
#[derive(Clone)]
pub struct MetricsSources {
    /// The plugin manager.
    pub registry: RegistryHandle,
    /// The device manager.
    pub devices: DeviceManager,
    /// The DRA manager.
    pub dra: DraManager,
}

impl MetricsSources {
    async fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP plugin_manager_total_plugins Number of plugins in Plugin Manager\n# TYPE plugin_manager_total_plugins gauge"
        );
        if let Ok(plugins) = self.registry.snapshot().await {
            let names = &["socket_path", "state"];
            for plugin in &plugins {
                let socket = plugin.socket_path.display().to_string();
                let desired = vec![socket.clone(), "desired_state_of_world".to_string()];
                let _ = writeln!(
                    out,
                    "plugin_manager_total_plugins{} 1",
                    labels(names, &desired, None)
                );
                if plugin.state == PluginState::Registered {
                    let actual = vec![socket, "actual_state_of_world".to_string()];
                    let _ = writeln!(
                        out,
                        "plugin_manager_total_plugins{} 1",
                        labels(names, &actual, None)
                    );
                }
            }
        }
        self.devices.render_metrics(&mut out);
        self.dra.render_metrics(&mut out);
        out
    }

    async fn respond(&self, path: &str) -> hyper::Response<Full<Bytes>> {
        let (status, content_type, body) = match path {
            "/metrics" => (200, "text/plain; version=0.0.4", self.render().await),
            "/healthz" => (200, "text/plain", "ok\n".to_string()),
            "/readyz" if self.registry.is_ready() => (200, "text/plain", "ok\n".to_string()),
            "/readyz" => (
                503,
                "text/plain",
                "not ready: the plugins present at start-up are still being picked up\n"
                    .to_string(),
            ),
            _ => (404, "text/plain", "not found\n".to_string()),
        };
        let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        if let Ok(value) = http::HeaderValue::from_str(content_type) {
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, value);
        }
        response
    }
}

/// Binds `addr` and answers until `shutdown`; returns the bound address and
/// the serving future.
pub async fn serve_metrics(
    addr: SocketAddr,
    sources: MetricsSources,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let serving = async move {
        loop {
            let stream = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept failed");
                        // Out of file descriptors and the like: pause instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let sources = sources.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let sources = sources.clone();
                    async move { Ok::<_, Infallible>(sources.respond(request.uri().path()).await) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = connection => {}
                }
            });
        }
    };
    Ok((local, serving))
}

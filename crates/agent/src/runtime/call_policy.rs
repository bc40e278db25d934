//! The policy of every call to the container runtime, as one tower layer
//! under the generated CRI clients rather than code at each call site:
//!
//! - **a deadline**: the kubelet's `--runtime-request-timeout` (2 min) for
//!   every unary call, sent to the runtime as `grpc-timeout` too; a call
//!   that sets its own (`StopContainer` adds the grace period, as the
//!   kubelet does) keeps it; the event stream has none;
//! - **metrics** with the kubelet's names: `kubelet_runtime_operations_total`,
//!   `..._duration_seconds` and `..._errors_total` by `operation_type`
//!   (`run_podsandbox`, `create_container`...);
//! - **a span** per call naming the operation, so log lines within it need
//!   not;
//! - **error mapping**: a deadline that passes is `DeadlineExceeded`, which
//!   the clients hand back as a `tonic::Status` like any other failure.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service};
use tracing::Instrument;

use crate::metrics::{CounterVec, DEFAULT_BUCKETS, HistogramVec, MetricsSource};

/// The kubelet's `--runtime-request-timeout` default.
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The header a gRPC client sends its deadline in.
const GRPC_TIMEOUT: &str = "grpc-timeout";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The runtime calls' metrics, with the kubelet's names. Cheap to clone.
#[derive(Clone)]
pub struct RuntimeMetrics {
    operations: CounterVec,
    durations: HistogramVec,
    errors: CounterVec,
}

impl std::fmt::Debug for RuntimeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeMetrics").finish_non_exhaustive()
    }
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        Self {
            operations: CounterVec::new(
                "kubelet_runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                &["operation_type"],
            ),
            durations: HistogramVec::new(
                "kubelet_runtime_operations_duration_seconds",
                "Duration in seconds of runtime operations. Broken down by operation type.",
                &["operation_type"],
                DEFAULT_BUCKETS,
            ),
            errors: CounterVec::new(
                "kubelet_runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                &["operation_type"],
            ),
        }
    }
}

impl RuntimeMetrics {
    /// How many `operation` calls were made.
    pub fn operations(&self, operation: &str) -> u64 {
        self.operations.get(&[operation])
    }

    /// How many `operation` calls failed.
    pub fn errors(&self, operation: &str) -> u64 {
        self.errors.get(&[operation])
    }
}

#[async_trait::async_trait]
impl MetricsSource for RuntimeMetrics {
    async fn render(&self, out: &mut String) {
        self.operations.render(out);
        self.durations.render(out);
        self.errors.render(out);
    }
}

/// The layer: deadlines of `timeout` and `metrics`.
#[derive(Clone)]
pub(crate) struct CallPolicyLayer {
    timeout: Duration,
    metrics: RuntimeMetrics,
}

impl CallPolicyLayer {
    /// Unary calls bounded by `timeout` unless they set their own,
    /// counted in `metrics`.
    pub(crate) fn new(timeout: Duration, metrics: RuntimeMetrics) -> Self {
        Self { timeout, metrics }
    }
}

impl<S> Layer<S> for CallPolicyLayer {
    type Service = CallPolicy<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CallPolicy {
            inner,
            policy: Arc::new(self.clone()),
        }
    }
}

/// The layer's service around `S`.
#[derive(Clone)]
pub(crate) struct CallPolicy<S> {
    inner: S,
    policy: Arc<CallPolicyLayer>,
}

impl<S, B, R> Service<http::Request<B>> for CallPolicy<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Send,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    R: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let operation = operation_type(request.uri().path());
        let streaming = operation == "get_container_events";
        let deadline = match request.headers().get(GRPC_TIMEOUT) {
            Some(set) => parse_grpc_timeout(set.as_bytes()),
            None if streaming => None,
            None => {
                let timeout = self.policy.timeout;
                if let Ok(value) = http::HeaderValue::from_str(&format!("{}m", timeout.as_millis()))
                {
                    request.headers_mut().insert(GRPC_TIMEOUT, value);
                }
                Some(timeout)
            }
        };
        let metrics = self.policy.metrics.clone();
        let span = tracing::debug_span!("runtime", operation = %operation);
        let call = self.inner.call(request);
        Box::pin(
            async move {
                let started = Instant::now();
                let answered = match deadline {
                    Some(deadline) => match tokio::time::timeout(deadline, call).await {
                        Ok(answered) => answered.map_err(Into::into),
                        Err(_) => Err(Box::new(tonic::Status::deadline_exceeded(format!(
                            "no answer within {deadline:?}"
                        ))) as BoxError),
                    },
                    None => call.await.map_err(Into::into),
                };
                metrics.operations.inc(&[&operation]);
                metrics.durations.observe(&[&operation], started.elapsed());
                let failed = match &answered {
                    Err(_) => true,
                    // A failure without a body puts its status in the headers.
                    Ok(response) => response
                        .headers()
                        .get("grpc-status")
                        .is_some_and(|status| status.as_bytes() != b"0"),
                };
                if failed {
                    metrics.errors.inc(&[&operation]);
                }
                answered
            }
            .instrument(span),
        )
    }
}

/// The kubelet's `operation_type` of a CRI method path
/// (`/runtime.v1.RuntimeService/RunPodSandbox` → `run_podsandbox`).
fn operation_type(path: &str) -> String {
    let method = path.rsplit('/').next().unwrap_or(path);
    let mut snake = String::with_capacity(method.len() + 4);
    for (i, c) in method.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    snake.replace("pod_sandbox", "podsandbox")
}

/// A `grpc-timeout` value (`<digits><unit>`), as a duration.
fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(amount * 3600),
        b"M" => Duration::from_secs(amount * 60),
        b"S" => Duration::from_secs(amount),
        b"m" => Duration::from_millis(amount),
        b"u" => Duration::from_micros(amount),
        b"n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_as_the_kubelet_names_them() {
        for (path, name) in [
            ("/runtime.v1.RuntimeService/RunPodSandbox", "run_podsandbox"),
            (
                "/runtime.v1.RuntimeService/PodSandboxStatus",
                "podsandbox_status",
            ),
            (
                "/runtime.v1.RuntimeService/ListPodSandbox",
                "list_podsandbox",
            ),
            (
                "/runtime.v1.RuntimeService/CreateContainer",
                "create_container",
            ),
            (
                "/runtime.v1.RuntimeService/ListContainers",
                "list_containers",
            ),
            (
                "/runtime.v1.RuntimeService/GetContainerEvents",
                "get_container_events",
            ),
            ("/runtime.v1.ImageService/PullImage", "pull_image"),
            ("/runtime.v1.ImageService/ImageFsInfo", "image_fs_info"),
        ] {
            assert_eq!(operation_type(path), name);
        }
    }

    #[test]
    fn grpc_timeouts_are_read_in_each_unit() {
        assert_eq!(
            parse_grpc_timeout(b"120000m"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout(b"7"), None);
        assert_eq!(parse_grpc_timeout(b""), None);
    }
}

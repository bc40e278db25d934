//! The policy of every gRPC call made to a peer (a plugin, a driver, the
//! container runtime), as one tower layer under the generated clients
//! rather than code at each call site:
//!
//! - **a deadline per method**, chosen when the client is made: sent to the
//!   peer as `grpc-timeout` and enforced here whether or not the peer
//!   honours it; a request that carries its own `grpc-timeout` keeps it;
//!   streams are given none;
//! - **a span per call**, `call{peer_kind, peer, method}`, so that what is
//!   logged within it names the peer and the method once;
//! - **metrics** through a [`CallMetrics`] hook (the container runtime's
//!   are the kubelet's `kubelet_runtime_operations_*`);
//! - **error mapping**: a deadline that passes here is a `DeadlineExceeded`
//!   status marked as this side's, which [`CallError::from_status`] reads
//!   back as [`CallError::Timeout`]; a peer's own `DeadlineExceeded` stays
//!   the peer's answer.
//!
//! [`CallError::from_status`]: crate::call::CallError::from_status
//! [`CallError::Timeout`]: crate::call::CallError::Timeout

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service};
use tracing::Instrument;

use crate::call::local_timeout;

/// The header a gRPC client sends its deadline in.
const GRPC_TIMEOUT: &str = "grpc-timeout";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where a layer reports each call it saw end.
pub trait CallMetrics: Send + Sync {
    /// A call of `method` (the gRPC method name, `RunPodSandbox`) ended
    /// after `elapsed`, failed or not.
    fn observed(&self, method: &str, elapsed: Duration, failed: bool);

    /// The same, with how it ended: the peer's gRPC status code (`Ok` when
    /// it answered), `DeadlineExceeded` when this side's deadline passed,
    /// and `None` when the call failed before the peer could answer (the
    /// connection). By default, [`observed`](Self::observed).
    fn observed_status(&self, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
        self.observed(method, elapsed, code != Some(tonic::Code::Ok));
    }
}

/// The policy: who the peer is, each method's deadline, and where the
/// metrics go. Cheap to clone.
#[derive(Clone)]
pub struct CallLayer {
    policy: Arc<Policy>,
}

#[derive(Clone)]
struct Policy {
    peer_kind: &'static str,
    peer: Arc<str>,
    default_deadline: Option<Duration>,
    deadlines: Vec<(&'static str, Option<Duration>)>,
    metrics: Option<Arc<dyn CallMetrics>>,
}

impl CallLayer {
    /// Calls to `peer` (a socket path, a driver name), a `peer_kind` (`device
    /// plugin`, `DRA driver`, `runtime`...), with no deadline until one is
    /// set.
    pub fn new(peer_kind: &'static str, peer: impl std::fmt::Display) -> Self {
        Self {
            policy: Arc::new(Policy {
                peer_kind,
                peer: Arc::from(peer.to_string()),
                default_deadline: None,
                deadlines: Vec::new(),
                metrics: None,
            }),
        }
    }

    /// Every method's deadline, unless set for it.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        Arc::make_mut(&mut self.policy).default_deadline = Some(deadline);
        self
    }

    /// `method`'s deadline (`None`: a stream, with none).
    #[must_use]
    pub fn method_deadline(mut self, method: &'static str, deadline: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.policy)
            .deadlines
            .push((method, deadline));
        self
    }

    /// Reports each call to `metrics`.
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<dyn CallMetrics>) -> Self {
        Arc::make_mut(&mut self.policy).metrics = Some(metrics);
        self
    }

    /// `inner` under this policy (what [`Layer::layer`] gives).
    pub fn service<S>(&self, inner: S) -> CallService<S> {
        self.layer(inner)
    }

    /// The deadline of `method`.
    fn deadline_of(&self, method: &str) -> Option<Duration> {
        self.policy
            .deadlines
            .iter()
            .find(|(m, _)| *m == method)
            .map_or(self.policy.default_deadline, |(_, d)| *d)
    }
}

impl std::fmt::Debug for CallLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallLayer")
            .field("peer_kind", &self.policy.peer_kind)
            .field("peer", &self.policy.peer)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for CallLayer {
    type Service = CallService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CallService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The layer's service around `S`.
#[derive(Clone, Debug)]
pub struct CallService<S> {
    inner: S,
    layer: CallLayer,
}

impl<S, B, R> Service<http::Request<B>> for CallService<S>
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
        let method: Arc<str> = Arc::from(method_of(request.uri().path()));
        let deadline = match request.headers().get(GRPC_TIMEOUT) {
            Some(set) => parse_grpc_timeout(set.as_bytes()),
            None => {
                let deadline = self.layer.deadline_of(&method);
                if let Some(deadline) = deadline
                    && let Ok(value) =
                        http::HeaderValue::from_str(&format!("{}m", deadline.as_millis()))
                {
                    request.headers_mut().insert(GRPC_TIMEOUT, value);
                }
                deadline
            }
        };
        let policy = self.layer.policy.clone();
        let span = tracing::info_span!("call", peer_kind = policy.peer_kind, peer = %policy.peer, method = %method);
        let call = self.inner.call(request);
        Box::pin(
            async move {
                let started = Instant::now();
                let answered = match deadline {
                    Some(deadline) => match tokio::time::timeout(deadline, call).await {
                        Ok(answered) => answered.map_err(Into::into),
                        Err(_) => Err(Box::new(local_timeout(deadline)) as BoxError),
                    },
                    None => call.await.map_err(Into::into),
                };
                let code = match &answered {
                    Err(error) => error
                        .downcast_ref::<tonic::Status>()
                        .map(tonic::Status::code),
                    // A failure without a body puts its status in the headers.
                    Ok(response) => Some(
                        response
                            .headers()
                            .get("grpc-status")
                            .and_then(|status| std::str::from_utf8(status.as_bytes()).ok())
                            .and_then(|status| status.parse::<i32>().ok())
                            .map_or(tonic::Code::Ok, tonic::Code::from),
                    ),
                };
                if let Some(metrics) = &policy.metrics {
                    metrics.observed_status(&method, started.elapsed(), code);
                }
                if let Err(error) = &answered {
                    tracing::debug!(%error, "call failed");
                }
                answered
            }
            .instrument(span),
        )
    }
}

/// The method name of a gRPC path (`/runtime.v1.RuntimeService/RunPodSandbox`
/// → `RunPodSandbox`).
fn method_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A `grpc-timeout` value (`<digits><unit>`), as a duration.
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    let digits = std::str::from_utf8(digits).ok()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n.saturating_mul(3600)),
        b'M' => Duration::from_secs(n.saturating_mul(60)),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_come_from_the_path() {
        assert_eq!(
            method_of("/runtime.v1.RuntimeService/RunPodSandbox"),
            "RunPodSandbox"
        );
        assert_eq!(method_of("/v1beta1.DevicePlugin/Allocate"), "Allocate");
    }

    #[test]
    fn a_method_keeps_its_own_deadline_and_others_get_the_default() {
        let layer = CallLayer::new("device plugin", "/p.sock")
            .deadline(Duration::from_secs(10))
            .method_deadline("ListAndWatch", None)
            .method_deadline("Allocate", Some(Duration::from_secs(30)));
        assert_eq!(
            layer.deadline_of("GetDevicePluginOptions"),
            Some(Duration::from_secs(10))
        );
        assert_eq!(layer.deadline_of("ListAndWatch"), None);
        assert_eq!(layer.deadline_of("Allocate"), Some(Duration::from_secs(30)));
    }

    #[test]
    fn grpc_timeouts_are_read_in_each_unit() {
        assert_eq!(
            parse_grpc_timeout(b"120000m"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_grpc_timeout(b"1500000u"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_grpc_timeout(b"7"), None);
        assert_eq!(parse_grpc_timeout(b""), None);
    }
}

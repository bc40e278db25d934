//! The `v1` and `v1alpha1` `PodResourcesLister` services on the socket,
//! served through our transport (monitoring agents dial with the kubelet's
//! client, which sends a path-valued `:authority`), and served again when
//! the socket is removed. The services are routed here rather than by
//! generated code so that answers go out as the view's encoded bytes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use nodeplugins_api::constants::pod_resources::RATE_LIMITED;
use nodeplugins_api::podresources::{v1, v1alpha1};
use nodeplugins_api::transport::{BoundSocket, TransportError};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::{Body as HttpBody, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Code, Request, Response, Status};

use super::codec::EncodedCodec;
use super::config::PodResourcesConfig;
use super::metrics::{Method, PodResourcesMetrics};
use super::views::{ViewBuilder, Views, ViewsHandle};
use crate::common::served_socket;
use crate::common::token_bucket::TokenBucket;
use crate::device::DeviceHandle;
use crate::dra::DraHandle;
use crate::pods::PodsSnapshot;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What both services share.
struct Inner {
    views: ViewsHandle,
    limiter: Option<TokenBucket>,
    metrics: PodResourcesMetrics,
}

impl Inner {
    /// Answers one call: refused by the rate limit before anything is
    /// counted for the method, as upstream's interceptor refuses it before
    /// the service; otherwise counted, and counted again if it fails.
    async fn answer(&self, call: Call) -> Result<Bytes, Status> {
        let method = call.method();
        if let Some(limiter) = &self.limiter
            && !limiter.allow_at(Instant::now())
        {
            self.metrics.rate_limited();
            return Err(Status::resource_exhausted(RATE_LIMITED));
        }
        self.metrics.request(method);
        let answer = self.respond(call).await;
        if answer.is_err() {
            self.metrics.failed(method);
        }
        answer
    }

    async fn respond(&self, call: Call) -> Result<Bytes, Status> {
        match call {
            Call::List => Ok(self.views().await?.list.list()),
            Call::GetAllocatable => Ok(self.views().await?.allocatable.clone()),
            Call::Get(request) => {
                let views = self.views().await?;
                views
                    .list
                    .get(&request.pod_namespace, &request.pod_name)
                    .ok_or_else(|| {
                        // The kubelet returns a plain error, which gRPC sends as Unknown.
                        Status::new(
                            Code::Unknown,
                            format!(
                                "pod {} in namespace {} not found",
                                request.pod_name, request.pod_namespace
                            ),
                        )
                    })
            }
            Call::ListV1alpha1 => Ok(self.views().await?.list.list_v1alpha1()),
        }
    }

    /// The answers of now.
    async fn views(&self) -> Result<Arc<Views>, Status> {
        self.views.views().await.map_err(|_| stopping())
    }
}

fn stopping() -> Status {
    Status::unavailable("the agent is stopping")
}

/// A call, with what it asks.
enum Call {
    List,
    GetAllocatable,
    Get(v1::GetPodResourcesRequest),
    ListV1alpha1,
}

impl Call {
    /// What it counts as.
    fn method(&self) -> Method {
        match self {
            Self::List => Method::List,
            Self::GetAllocatable => Method::GetAllocatable,
            Self::Get(_) => Method::Get,
            Self::ListV1alpha1 => Method::ListV1alpha1,
        }
    }
}

/// One method of the server: decodes its request into a [`Call`].
struct Handler<D> {
    inner: Arc<Inner>,
    call: fn(D) -> Call,
}

impl<D: Send + 'static> UnaryService<D> for Handler<D> {
    type Response = Bytes;
    type Future = BoxFuture<Result<Response<Bytes>, Status>>;

    fn call(&mut self, request: Request<D>) -> Self::Future {
        let inner = self.inner.clone();
        let call = (self.call)(request.into_inner());
        Box::pin(async move { inner.answer(call).await.map(Response::new) })
    }
}

/// The service `NAME`, routing its methods.
#[derive(Clone)]
struct Lister<const V1: bool>(Arc<Inner>);

impl NamedService for Lister<true> {
    const NAME: &'static str = "v1.PodResourcesLister";
}

impl NamedService for Lister<false> {
    const NAME: &'static str = "v1alpha1.PodResourcesLister";
}

async fn unary<D, B>(
    inner: Arc<Inner>,
    call: fn(D) -> Call,
    request: http::Request<B>,
) -> http::Response<Body>
where
    D: prost::Message + Default + Send + 'static,
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    let mut grpc = Grpc::new(EncodedCodec::<D>::default());
    grpc.unary(Handler { inner, call }, request).await
}

fn unimplemented() -> http::Response<Body> {
    Status::unimplemented("").into_http()
}

impl<const V1: bool, B> tower_service::Service<http::Request<B>> for Lister<V1>
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let inner = self.0.clone();
        let path = request.uri().path().to_string();
        Box::pin(async move {
            let response = match (V1, path.as_str()) {
                (true, "/v1.PodResourcesLister/List") => {
                    unary(inner, |_: v1::ListPodResourcesRequest| Call::List, request).await
                }
                (true, "/v1.PodResourcesLister/GetAllocatableResources") => {
                    let call = |_: v1::AllocatableResourcesRequest| Call::GetAllocatable;
                    unary(inner, call, request).await
                }
                (true, "/v1.PodResourcesLister/Get") => unary(inner, Call::Get, request).await,
                (false, "/v1alpha1.PodResourcesLister/List") => {
                    let call = |_: v1alpha1::ListPodResourcesRequest| Call::ListV1alpha1;
                    unary(inner, call, request).await
                }
                _ => unimplemented(),
            };
            Ok(response)
        })
    }
}

/// Binds the socket: the directory gets the configured permissions first,
/// so the socket is never reachable by others before its own are set.
async fn bind(config: &PodResourcesConfig) -> Result<BoundSocket, TransportError> {
    if let Some(dir) = config.socket.parent() {
        served_socket::create_dir_with_mode(dir, config.dir_mode()).map_err(|source| {
            TransportError::Bind {
                path: config.socket.clone(),
                source,
            }
        })?;
    }
    BoundSocket::bind(&config.socket, Some(config.mode)).await
}

/// Binds the socket of `config` and serves the pod-resources API on it
/// until `shutdown`, serving it again whenever the file is removed. Answers
/// come from `devices`' and `dra`'s snapshots, made into views by a task
/// of their own; with `pods` (the pods owner's snapshots, when the node's
/// pods are served from the API), they list exactly the admitted pods, as
/// the kubelet lists the pods it runs. A failed bind is returned at once.
pub async fn serve(
    config: PodResourcesConfig,
    devices: DeviceHandle,
    dra: DraHandle,
    pods: Option<watch::Receiver<Arc<PodsSnapshot>>>,
    metrics: PodResourcesMetrics,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let socket = bind(&config).await?;
    let (builder, views) = ViewBuilder::new(devices, dra, pods);
    let inner = Arc::new(Inner {
        views,
        limiter: config.rate_limit.map(|l| TokenBucket::new(l.qps, l.burst)),
        metrics: metrics.clone(),
    });
    let router = || {
        tonic::transport::Server::builder()
            .add_service(Lister::<true>(inner.clone()))
            .add_service(Lister::<false>(inner.clone()))
    };
    let serving = served_socket::serve_grpc(
        &config.fs_watcher,
        socket,
        || bind(&config),
        router,
        "pod-resources API",
        || metrics.socket_recreated(),
        shutdown.clone(),
    );
    // The views are built beside serving, in this task: they end together.
    // (The builder ends at shutdown; serving then ends too.)
    tokio::pin!(serving);
    tokio::select! {
        served = &mut serving => return served,
        () = builder.run(shutdown) => {}
    }
    serving.await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::device::{DeviceManager, DeviceManagerConfig};
    use crate::dra::{DraManager, DraManagerConfig, LoggingCleanup};

    /// A server whose managers have stopped, as while the agent stops.
    fn stopping_server(metrics: &PodResourcesMetrics) -> Inner {
        let (_, devices) = DeviceManager::new(DeviceManagerConfig::new("/nonexistent"));
        let (_, dra) = DraManager::new(DraManagerConfig::default(), Arc::new(LoggingCleanup));
        let (builder, views) = ViewBuilder::new(devices, dra, None);
        tokio::spawn(builder.run(CancellationToken::new()));
        Inner {
            views,
            limiter: None,
            metrics: metrics.clone(),
        }
    }

    #[tokio::test]
    async fn calls_failing_while_the_agent_stops_count_as_the_methods_errors() {
        let metrics = PodResourcesMetrics::default();
        let inner = stopping_server(&metrics);
        let get = v1::GetPodResourcesRequest {
            pod_name: "train".into(),
            pod_namespace: "ml".into(),
        };
        for call in [
            Call::List,
            Call::GetAllocatable,
            Call::Get(get),
            Call::ListV1alpha1,
        ] {
            let answer = tokio::time::timeout(Duration::from_secs(10), inner.answer(call))
                .await
                .unwrap();
            assert_eq!(answer.unwrap_err().code(), Code::Unavailable);
        }
        let text = crate::metrics::encoded(&metrics);
        for family in ["errors_list", "errors_get_allocatable", "errors_get"] {
            let line =
                format!(r#"kubelet_pod_resources_endpoint_{family}{{server_api_version="v1"}} 1"#);
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(text.lines().any(|l| l
            == r#"kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"} 1"#));
    }
}

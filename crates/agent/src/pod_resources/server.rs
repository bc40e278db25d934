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
use nodeplugins_api::podresources::{v1, v1alpha1};
use nodeplugins_api::transport::{BoundSocket, TransportError};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::{Body as HttpBody, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Code, Request, Response, Status};

use super::codec::EncodedCodec;
use super::config::PodResourcesConfig;
use super::metrics::{Method, PodResourcesMetrics};
use super::rate_limit::Limiter;
use super::source::ViewSource;
use super::view::PodView;
use crate::device::DeviceHandle;
use crate::dra::DraHandle;
use crate::served_socket;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What both services share.
struct Inner {
    source: ViewSource,
    limiter: Option<Limiter>,
    metrics: PodResourcesMetrics,
}

impl Inner {
    /// Counts a call to `method` of `version`, once it passed the rate limit.
    fn admit(&self, version: &str, method: Method) -> Result<(), Status> {
        if let Some(limiter) = &self.limiter
            && let Err(refused) = limiter.check()
        {
            self.metrics.rate_limited();
            return Err(refused);
        }
        self.metrics.request(version, method);
        Ok(())
    }

    /// The pods to answer `method` of `version` from.
    async fn view(&self, version: &str, method: Method) -> Result<Arc<PodView>, Status> {
        self.admit(version, method)?;
        self.source.view().await.map_err(|_| stopping())
    }

    /// Answers one call.
    async fn answer(&self, call: Call) -> Result<Bytes, Status> {
        match call {
            Call::List => Ok(self.view("v1", Method::List).await?.list()),
            Call::GetAllocatable => {
                self.admit("v1", Method::GetAllocatable)?;
                self.source.allocatable().await.map_err(|_| stopping())
            }
            Call::Get(request) => {
                let view = self.view("v1", Method::Get).await?;
                view.get(&request.pod_namespace, &request.pod_name)
                    .ok_or_else(|| {
                        self.metrics.get_failed("v1");
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
            Call::ListV1alpha1 => Ok(self.view("v1alpha1", Method::List).await?.list_v1alpha1()),
        }
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
/// come from `devices` and `dra`; a failed bind is returned at once.
pub async fn serve(
    config: PodResourcesConfig,
    devices: DeviceHandle,
    dra: DraHandle,
    metrics: PodResourcesMetrics,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let socket = bind(&config).await?;
    let inner = Arc::new(Inner {
        source: ViewSource::new(devices, dra),
        limiter: config.rate_limit.map(Limiter::new),
        metrics: metrics.clone(),
    });
    let router = || {
        tonic::transport::Server::builder()
            .add_service(Lister::<true>(inner.clone()))
            .add_service(Lister::<false>(inner.clone()))
    };
    served_socket::serve_grpc(
        socket,
        || bind(&config),
        router,
        "the pod-resources API",
        || metrics.socket_recreated(),
        shutdown,
    )
    .await
}

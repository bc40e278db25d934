//! Dialing gRPC servers on Unix sockets, the way the kubelet does: the path
//! is only used to connect, and `:authority` is `localhost`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use super::{TransportError, check_socket_path};

fn endpoint(path: &Path) -> Result<(Endpoint, PathBuf), TransportError> {
    check_socket_path(path)?;
    // Only the authority of this URI is used: it becomes `:authority: localhost`.
    Ok((Endpoint::from_static("http://localhost"), path.to_owned()))
}

fn connector(
    path: PathBuf,
) -> impl tower::Service<
    http::Uri,
    Response = TokioIo<UnixStream>,
    Error = std::io::Error,
    Future = impl Future<Output = std::io::Result<TokioIo<UnixStream>>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: http::Uri| {
        let path = path.clone();
        async move { UnixStream::connect(path).await.map(TokioIo::new) }
    })
}

/// Connects to the gRPC server at `path`, failing after `timeout`.
///
/// This completes once the socket connects (a missing socket or one with no
/// listener fails at once); the HTTP/2 handshake finishes with the first call,
/// so callers bound every call with their own timeout, as the kubelet does.
/// The channel reconnects by itself if the connection later drops.
pub async fn dial(path: impl AsRef<Path>, timeout: Duration) -> Result<Channel, TransportError> {
    let (endpoint, path) = endpoint(path.as_ref())?;
    let endpoint = endpoint.connect_timeout(timeout);
    let connect = endpoint.connect_with_connector(connector(path.clone()));
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(source)) => Err(TransportError::Dial { path, source }),
        Err(_) => Err(TransportError::DialTimeout { path, timeout }),
    }
}

/// A channel to `path` that connects on first use and reconnects as needed;
/// each connection attempt is bounded by `connect_timeout`.
pub fn dial_lazy(
    path: impl AsRef<Path>,
    connect_timeout: Duration,
) -> Result<Channel, TransportError> {
    let (endpoint, path) = endpoint(path.as_ref())?;
    Ok(endpoint
        .connect_timeout(connect_timeout)
        .connect_with_connector_lazy(connector(path)))
}

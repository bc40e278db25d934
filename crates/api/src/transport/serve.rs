//! Serving gRPC on a bound Unix socket.

use std::time::Duration;

use futures::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;

use super::{BoundSocket, ServerConnection, TransportError};

/// How long in-flight calls and open streams get to finish after shutdown is
/// requested before their connections are closed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Serves `router` on `socket` until `shutdown` is cancelled, then closes
/// every connection (gracefully for up to [`SHUTDOWN_GRACE`]) and removes the
/// socket file. Every connection accepts a path-valued `:authority`.
pub async fn serve(
    socket: BoundSocket,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let path = socket.path().to_owned();
    let (listener, file) = socket.into_parts();
    let force_close = CancellationToken::new();
    let incoming = {
        let force_close = force_close.clone();
        UnixListenerStream::new(listener)
            .map(move |conn| conn.map(|stream| ServerConnection::new(stream, force_close.clone())))
    };
    let server = router.serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned());
    let closer = async {
        shutdown.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        force_close.cancel();
        std::future::pending::<()>().await;
    };
    let result = tokio::select! {
        result = server => result,
        () = closer => Ok(()),
    };
    force_close.cancel();
    drop(file);
    result.map_err(|source| TransportError::Serve { path, source })
}

//! Taking the next connection on a TCP port (the kubelet's API and its
//! read-only port).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The next connection to `listener` (`None` once `shutdown`), its
/// failures logged as `what`'s and tried again.
pub(crate) async fn accept(
    listener: &TcpListener,
    what: &str,
    shutdown: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return None,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return Some((stream, peer));
            }
            Err(e) => {
                // Out of file descriptors and such: the next accept may do
                // better.
                tracing::warn!(error = %e, "{what}: accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

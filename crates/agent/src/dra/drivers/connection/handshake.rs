//! One connection attempt: dial, HTTP/2 handshake, and the server's first
//! bytes.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use nodeplugins_api::transport::connect_unix;
use tokio::net::UnixStream;

use super::error::{ConnectError, ConnectionEnd};
use super::link::Body;

/// A connection to drive until it ends.
pub(crate) type Driven = Pin<Box<http2::Connection<TokioIo<FirstRead>, Body, TokioExecutor>>>;

/// Dials, performs the handshake, and waits for the plugin's first bytes
/// (its SETTINGS frame). A socket in the listen backlog of a process that is
/// exiting accepts the dial and the client preface; only an answer shows a
/// server is there.
pub(crate) async fn handshake(
    endpoint: &Arc<Path>,
) -> Result<(SendRequest<Body>, Driven), ConnectError> {
    let path = || endpoint.clone();
    let stream = connect_unix(endpoint).map_err(|source| ConnectError::Dial {
        path: path(),
        source,
    })?;
    let (answered, first_read) = tokio::sync::oneshot::channel();
    let io = FirstRead {
        inner: stream,
        first_read: Some(answered),
    };
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| ConnectError::Handshake {
            path: path(),
            source: ConnectionEnd::Http2(e),
        })?;
    let mut connection = Box::pin(connection);
    tokio::select! {
        _ = first_read => Ok((sender, connection)),
        ended = &mut connection => Err(match ended {
            Ok(()) => ConnectError::ClosedBeforeAnswer { path: path() },
            Err(e) => ConnectError::Failed { path: path(), source: ConnectionEnd::Http2(e) },
        }),
    }
}

/// A socket that reports the first bytes it reads.
pub(crate) struct FirstRead {
    inner: UnixStream,
    first_read: Option<tokio::sync::oneshot::Sender<()>>,
}

impl tokio::io::AsyncRead for FirstRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got_bytes = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if let Some(tx) = self.first_read.take_if(|_| got_bytes) {
            let _ = tx.send(());
        }
        polled
    }
}

impl tokio::io::AsyncWrite for FirstRead {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

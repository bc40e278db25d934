//! A server-side connection as our gRPC servers see it: the client's bytes
//! pass through the [`AuthorityRewriter`], and the connection can be closed
//! from outside when a graceful shutdown takes too long.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

use super::authority::{AuthorityRewriter, RewriteStats};

/// How much is read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// A client connection accepted by one of our servers.
pub struct ServerConnection<S> {
    inner: S,
    rewriter: AuthorityRewriter,
    /// Bytes already rewritten, waiting for the server to read them.
    pending: BytesMut,
    scratch: Box<[u8]>,
    eof: bool,
    /// Fires when the server gives up waiting for a graceful close.
    force_close: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<S> ServerConnection<S> {
    /// Wraps an accepted stream; cancelling `force_close` makes every later
    /// read and write fail, which ends the connection.
    pub fn new(inner: S, force_close: CancellationToken) -> Self {
        Self {
            inner,
            rewriter: AuthorityRewriter::new(),
            pending: BytesMut::new(),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            eof: false,
            force_close: Box::pin(force_close.cancelled_owned()),
        }
    }

    /// What the authority rewriter did on this connection.
    pub fn rewrite_stats(&self) -> RewriteStats {
        self.rewriter.stats()
    }

    fn check_open(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.force_close.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "server shut down before the connection closed gracefully",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ServerConnection<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.eof || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk))?;
            let read = chunk.filled();
            if read.is_empty() {
                this.eof = true;
                continue;
            }
            this.rewriter
                .feed(read, &mut this.pending)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ServerConnection<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_open(cx)?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for ServerConnection<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

//! A server-side connection as our gRPC servers see it: the client's bytes
//! pass through the [`AuthorityRewriter`], and the connection can be closed
//! from outside when a graceful shutdown takes too long.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

use super::authority::AuthorityRewriter;

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
    /// Cancelled when the server gives up waiting for a graceful close.
    force_close: CancellationToken,
    /// Registers the task for that cancellation; polled only when the socket
    /// would block, so the fast path is a flag check.
    force_close_wait: Pin<Box<WaitForCancellationFutureOwned>>,
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
            force_close_wait: Box::pin(force_close.clone().cancelled_owned()),
            force_close,
        }
    }

    fn closed_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "server shut down before the connection closed gracefully",
        )
    }

    fn check_open(&self) -> io::Result<()> {
        if self.force_close.is_cancelled() {
            Err(Self::closed_error())
        } else {
            Ok(())
        }
    }

    /// Called when the socket would block: make sure a forced close wakes us.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.force_close_wait.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Self::closed_error())),
            Poll::Pending => Poll::Pending,
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
        this.check_open()?;
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
            if Pin::new(&mut this.inner)
                .poll_read(cx, &mut chunk)?
                .is_pending()
            {
                return this.pending(cx);
            }
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
        this.check_open()?;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.pending(cx),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_open()?;
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.pending(cx),
            ready => ready,
        }
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

//! Single unary gRPC calls on a connection of their own, for the agent's
//! short conversations with a plugin's registration socket (GetInfo, then
//! NotifyRegistrationStatus).
//!
//! A general channel pays for its generality on every call: a queue in
//! front of the connection and a task that streams each request body,
//! which sends a request's headers and body in separate writes, each a
//! wake-up of the plugin. Here a call is its headers and its one message
//! queued together, so a request is one write (the first also carries the
//! connection's settings), and the answer is read in the caller's task.
//! The `:authority` is `localhost`, as from [`super::dial`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, Method, Request};
use tokio::net::UnixStream;
use tonic::{Code, Status};

use super::{TransportError, check_socket_path};

/// The largest answer accepted, as a channel's default.
pub const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// A connection for unary calls, driven by the calls themselves (nothing
/// runs between them). Dropping it closes the connection.
pub struct UnaryConnection {
    send: h2::client::SendRequest<Bytes>,
    connection: h2::client::Connection<Corked, Bytes>,
    /// Why the connection ended, once it has.
    ended: Option<String>,
    path: PathBuf,
}

impl std::fmt::Debug for UnaryConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnaryConnection")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl UnaryConnection {
    /// Connects to the gRPC server at `path`, failing after `timeout`. The
    /// HTTP/2 preface goes out at once; nothing is waited for.
    pub async fn connect(
        path: impl AsRef<Path>,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        let path = path.as_ref().to_owned();
        check_socket_path(&path)?;
        let connecting = async {
            let stream = Corked::new(super::connect_unix(&path)?);
            h2::client::Builder::new()
                .enable_push(false)
                .handshake::<_, Bytes>(stream)
                .await
                .map_err(std::io::Error::other)
        };
        let (send, connection) = match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(handshake)) => handshake,
            Ok(Err(source)) => return Err(TransportError::Connect { path, source }),
            Err(_) => return Err(TransportError::DialTimeout { path, timeout }),
        };
        Ok(Self {
            send,
            connection,
            ended: None,
            path,
        })
    }

    /// The socket this connection is to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `method` (`/package.Service/Method`) with `request`, driving
    /// the connection until the answer is in: the request goes out in the
    /// connection's first write after it is queued.
    pub async fn call<Req, Resp>(&mut self, method: &str, request: &Req) -> Result<Resp, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        if let Some(ended) = &self.ended {
            return Err(Status::unavailable(format!(
                "transport error: the connection ended: {ended}"
            )));
        }
        let exchange = Self::exchange(self.send.clone(), method, request);
        tokio::pin!(exchange);
        loop {
            tokio::select! {
                biased;
                answer = &mut exchange => return answer,
                ended = &mut self.connection, if self.ended.is_none() => {
                    // The exchange sees the end too; let it say how.
                    self.ended = Some(match ended {
                        Ok(()) => "closed by the server".to_string(),
                        Err(e) => e.to_string(),
                    });
                }
            }
        }
    }

    async fn exchange<Req, Resp>(
        send: h2::client::SendRequest<Bytes>,
        method: &str,
        request: &Req,
    ) -> Result<Resp, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let mut send = send.ready().await.map_err(unavailable)?;
        let head = Request::builder()
            .method(Method::POST)
            .uri(format!("http://localhost{method}"))
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .header(http::header::USER_AGENT, "nodeplugins")
            .body(())
            .map_err(|e| Status::internal(format!("cannot build the request: {e}")))?;
        let (response, mut body) = send.send_request(head, false).map_err(unavailable)?;
        // Queued with the headers: both go out in the connection's next write.
        body.send_data(frame(request), true).map_err(unavailable)?;
        let response = response.await.map_err(unavailable)?;
        let (head, mut body) = response.into_parts();
        if head.status != http::StatusCode::OK {
            return Err(http_status(head.status));
        }
        // A trailers-only answer: the status is in the headers.
        if let Some(status) = Status::from_header_map(&head.headers) {
            return Err(match status.code() {
                Code::Ok => Status::internal("the answer carries no message"),
                _ => status,
            });
        }
        let mut received = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(unavailable)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            received.extend_from_slice(&chunk);
            // The message's length is known from its first five bytes.
            if let Some(header) = received.get(..5) {
                let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
                if len as usize > MAX_RESPONSE {
                    return Err(Status::resource_exhausted(format!(
                        "the answer is too large: {len} bytes, the limit is {MAX_RESPONSE}"
                    )));
                }
            }
            if received.len() > MAX_RESPONSE + 5 {
                return Err(Status::resource_exhausted(
                    "the answer goes on past its message",
                ));
            }
        }
        let trailers = body.trailers().await.map_err(unavailable)?;
        match trailers.as_ref().and_then(Status::from_header_map) {
            Some(status) if status.code() == Code::Ok => message(received.freeze()),
            Some(status) => Err(status),
            None => Err(missing_status(trailers.as_ref())),
        }
    }
}

/// `message` as a gRPC message: uncompressed flag, length, bytes.
fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // Encoding into a buffer reserved for it cannot fail.
    let _ = message.encode(&mut buf);
    buf.freeze()
}

/// The one message of a unary answer.
fn message<Resp: prost::Message + Default>(mut body: Bytes) -> Result<Resp, Status> {
    if body.len() < 5 {
        return Err(Status::internal("the answer has no message"));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::internal(
            "the answer is compressed, which was not offered",
        ));
    }
    if body.len() < len {
        return Err(Status::internal(format!(
            "the answer's message is cut short: {} of {len} bytes",
            body.len()
        )));
    }
    Resp::decode(body.split_to(len))
        .map_err(|e| Status::internal(format!("cannot decode the answer: {e}")))
}

fn unavailable(error: h2::Error) -> Status {
    let text = match error.get_io() {
        Some(io) => io.to_string(),
        None => error.to_string(),
    };
    Status::unavailable(format!("transport error: {text}"))
}

fn http_status(status: http::StatusCode) -> Status {
    // The gRPC mapping of HTTP status codes.
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("HTTP status {status}"))
}

fn missing_status(trailers: Option<&HeaderMap>) -> Status {
    match trailers {
        Some(_) => Status::unknown("the answer's trailers carry no grpc-status"),
        None => Status::unknown("the answer ended without trailers"),
    }
}

/// The socket, holding back the connection preface until the first frames
/// follow it, so that the server reads the preface, the settings and the
/// first request in one read instead of waking up for the preface alone.
pub(crate) struct Corked {
    inner: UnixStream,
    /// The preface, while it waits.
    held: Option<Bytes>,
}

impl Corked {
    fn new(inner: UnixStream) -> Self {
        Self { inner, held: None }
    }
}

impl tokio::io::AsyncRead for Corked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Corked {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.held.is_none() && buf.starts_with(PREFACE) && buf.len() == PREFACE.len() {
            // The preface alone: keep it for the next write.
            this.held = Some(Bytes::copy_from_slice(buf));
            return Poll::Ready(Ok(buf.len()));
        }
        let Some(held) = this.held.as_mut() else {
            return std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        // Send what is held first, with as much of `buf` as goes in the
        // same write; report only `buf`'s bytes as written.
        let slices = [std::io::IoSlice::new(held), std::io::IoSlice::new(buf)];
        let written = match std::pin::Pin::new(&mut this.inner).poll_write_vectored(cx, &slices) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        if written < held.len() {
            held.advance(written);
            // Nothing of `buf` went out yet; ask to be called again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let of_buf = written - held.len();
        this.held = None;
        if of_buf == 0 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(of_buf))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        // A flush with nothing after the preface: it goes out alone.
        while let Some(held) = this.held.as_mut() {
            match std::pin::Pin::new(&mut this.inner).poll_write(cx, held) {
                Poll::Ready(Ok(n)) if n >= held.len() => this.held = None,
                Poll::Ready(Ok(n)) => held.advance(n),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        std::pin::Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The HTTP/2 client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

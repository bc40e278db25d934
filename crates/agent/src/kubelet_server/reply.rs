//! The answers of the kubelet's API and their bodies: text as the
//! kubelet's `http.Error` and go-restful write it, JSON, and streamed
//! bodies (container logs, flushed chunk by chunk).

use bytes::Bytes;
use futures::StreamExt as _;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::sync::mpsc;

/// The body of every answer.
pub(crate) type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// An answer.
pub(crate) type Reply = Response<Body>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body (the 101 of an upgrade).
pub(crate) fn empty() -> Body {
    full(Bytes::new())
}

fn with_type(status: StatusCode, content_type: &'static str, body: Body) -> Reply {
    let mut reply = Response::new(body);
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    reply
}

/// `message` as plain text (go-restful's `WriteErrorString`: no newline).
pub(crate) fn text(status: StatusCode, message: impl Into<String>) -> Reply {
    with_type(status, "text/plain; charset=utf-8", full(message.into()))
}

/// `message` as Go's `http.Error` writes it: with a newline and
/// `X-Content-Type-Options: nosniff`.
pub(crate) fn http_error(status: StatusCode, message: &str) -> Reply {
    let mut reply = with_type(
        status,
        "text/plain; charset=utf-8",
        full(format!("{message}\n")),
    );
    reply.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    reply
}

/// `bytes` as JSON.
pub(crate) fn json(status: StatusCode, bytes: Vec<u8>) -> Reply {
    with_type(status, "application/json", full(bytes))
}

/// Raw bytes.
pub(crate) fn bytes(status: StatusCode, content_type: &'static str, bytes: Vec<u8>) -> Reply {
    with_type(status, content_type, full(bytes))
}

/// A body written as `chunks` come, each sent as it is (chunked
/// encoding, flushed per chunk); it ends when the sender is dropped.
pub(crate) fn streamed(content_type: &'static str, chunks: mpsc::Receiver<Bytes>) -> Reply {
    let frames = tokio_stream::wrappers::ReceiverStream::new(chunks)
        .map(|chunk| Ok(hyper::body::Frame::data(chunk)));
    with_type(
        StatusCode::OK,
        content_type,
        BodyExt::boxed(StreamBody::new(frames)),
    )
}

//! A small HTTP/1 server answering GETs with plain text by path: the
//! agent's `/metrics`, `/healthz` and `/readyz`, and the SDK's CSI registrar
//! `/healthz`. Each connection is a tracked task; a stop ends the accept
//! loop and every open connection, and [`serve_text`] returns once they
//! have.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl TextAnswer {
    /// `body` as `text/plain` with `status`.
    pub fn plain(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain",
            body: body.into(),
        }
    }

    /// 404, for a path nothing answers.
    pub fn not_found() -> Self {
        Self::plain(404, "not found\n")
    }

    fn into_response(self) -> hyper::Response<Full<Bytes>> {
        let mut response = hyper::Response::new(Full::new(Bytes::from(self.body)));
        *response.status_mut() = http::StatusCode::from_u16(self.status)
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        if let Ok(value) = http::HeaderValue::from_str(self.content_type) {
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, value);
        }
        response
    }
}

/// Answers every request on `listener` with `answer(path)` until
/// `shutdown`, then waits for the connections to end. `what` names the
/// server in the log line of a failed accept (which pauses the loop for a
/// moment instead of spinning, as when file descriptors run out).
pub async fn serve_text<F, Fut>(
    listener: TcpListener,
    what: &'static str,
    answer: F,
    shutdown: CancellationToken,
) where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = TextAnswer> + Send + 'static,
{
    let connections = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(server = what, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let answer = answer.clone();
        let stop = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let answered = answer(request.uri().path().to_string());
                async move { Ok::<_, Infallible>(answered.await.into_response()) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = stop.cancelled() => {}
                _ = connection => {}
            }
        });
    }
    connections.close();
    connections.wait().await;
}

//! One deadline for every request the API client sends, in its transport.
//!
//! Each request that is not a watch (or a followed log) must be answered,
//! headers and body, within the deadline; a watch streams for as long as
//! the server keeps it open (kube-runtime's watcher asks the server to end
//! it, and the client's read timeout catches a dead connection). A deadline
//! that passes here is an error carrying [`DeadlinePassed`], which
//! [`passed_deadline`] finds in a `kube::Error`, so that every caller names
//! it a timeout without keeping a timer of its own.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// The error of a request whose deadline passed in the client.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?}")]
pub(crate) struct DeadlinePassed(pub(crate) Duration);

/// Whether `error` is a deadline that passed in the client, and which.
pub(crate) fn passed_deadline(error: &kube::Error) -> Option<Duration> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(passed) = e.downcast_ref::<DeadlinePassed>() {
            return Some(passed.0);
        }
        source = e.source();
    }
    None
}

/// Puts [`DeadlineService`] under the client.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeadlineLayer {
    limit: Duration,
}

impl DeadlineLayer {
    /// Every request but watches answered within `limit`.
    pub(crate) fn new(limit: Duration) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService {
            inner,
            limit: self.limit,
        }
    }
}

/// The client's transport with a deadline on each request.
#[derive(Clone, Debug)]
pub(crate) struct DeadlineService<S> {
    inner: S,
    limit: Duration,
}

/// Whether the request streams until the server ends it: a watch, or a
/// followed log.
fn streams(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "follow=true" | "follow=1"))
    })
}

impl<S, RequestBody, ResponseBody> Service<http::Request<RequestBody>> for DeadlineService<S>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<DeadlineBody<ResponseBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let limit = self.limit;
        let deadline = (!streams(request.uri())).then(|| Instant::now() + limit);
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, call)
                    .await
                    .map_err(|_| DeadlinePassed(limit))?,
                None => call.await,
            }
            .map_err(Into::into)?;
            Ok(response.map(|body| DeadlineBody {
                inner: Box::pin(body),
                deadline: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
                limit,
            }))
        })
    }
}

/// A response body that must be read by the request's deadline.
pub(crate) struct DeadlineBody<B> {
    inner: Pin<Box<B>>,
    deadline: Option<Pin<Box<Sleep>>>,
    limit: Duration,
}

impl<B> Body for DeadlineBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = self.inner.as_mut().poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let limit = self.limit;
        let passed = self
            .deadline
            .as_mut()
            .is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
        if passed {
            return Poll::Ready(Some(Err(Box::new(DeadlinePassed(limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_and_followed_logs_stream_without_a_deadline() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(streams(&uri(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true&timeoutSeconds=290"
        )));
        assert!(streams(&uri("/api/v1/namespaces/d/pods/p/log?follow=true")));
        assert!(!streams(&uri(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn"
        )));
        assert!(!streams(&uri("/api/v1/nodes/n")));
        assert!(!streams(&uri("/api/v1/pods?watch=false")));
    }
}

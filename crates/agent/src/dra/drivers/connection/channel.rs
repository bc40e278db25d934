//! A gRPC channel over a monitored connection, for tonic clients.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::client::conn::http2::SendRequest;
use nodeplugins_api::transport::root_cause;
use tokio::sync::watch;
use tonic::Status;

use super::demand::Demand;
use super::link::{Body, Link};

/// Sends requests over the instance's current connection. A call without a
/// full connection (disconnected, or only a light one) asks the monitor for
/// one at once and waits for the outcome.
#[derive(Clone)]
pub(crate) struct Channel {
    link: watch::Receiver<Link>,
    demand: Arc<Demand>,
    endpoint: Arc<Path>,
}

impl Channel {
    pub(crate) fn new(
        link: watch::Receiver<Link>,
        demand: Arc<Demand>,
        endpoint: Arc<Path>,
    ) -> Self {
        Self {
            link,
            demand,
            endpoint,
        }
    }

    /// Follows the link.
    pub(crate) fn link(&self) -> watch::Receiver<Link> {
        self.link.clone()
    }

    async fn sender(mut self) -> Result<SendRequest<Body>, Status> {
        let current = self.link.borrow_and_update().clone();
        if let Some(sender) = current.sender.filter(|s| !s.is_closed()) {
            return Ok(sender);
        }
        self.demand.call();
        // The outcome of the monitor's next attempt at a full connection (a
        // light one made meanwhile does not carry calls).
        let seen = current.full_attempts;
        let link = self
            .link
            .wait_for(|s| s.sender.is_some() || s.full_attempts > seen)
            .await
            .map(|s| s.clone());
        match link {
            Ok(Link {
                sender: Some(sender),
                ..
            }) => Ok(sender),
            Ok(Link { last_error, .. }) => Err(Status::unavailable(format!(
                "DRA plugin at {} is not connected: {}",
                self.endpoint.display(),
                last_error.map_or_else(|| "no connection yet".into(), |e| e.to_string())
            ))),
            Err(_) => Err(Status::unavailable(format!(
                "DRA plugin at {} was removed",
                self.endpoint.display()
            ))),
        }
    }
}

impl tower_service::Service<http::Request<Body>> for Channel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = Status;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let channel = self.clone();
        Box::pin(async move {
            let endpoint = channel.endpoint.clone();
            let unavailable = |e: hyper::Error| {
                Status::unavailable(format!(
                    "DRA plugin at {}: {}",
                    endpoint.display(),
                    root_cause(&e)
                ))
            };
            let mut sender = channel.sender().await?;
            sender.ready().await.map_err(unavailable)?;
            sender.send_request(request).await.map_err(unavailable)
        })
    }
}

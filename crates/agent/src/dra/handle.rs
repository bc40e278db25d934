//! What callers hold: a cheap handle to the DRA manager's task. Prepare and
//! unprepare run in the caller's task over the instance's connection; the
//! manager's task only says which instance to use.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::calls;
use super::calls::Operation;
use super::claim::{ClaimRef, ClaimResult, PreparedClaim, UnpreparedClaim};
use super::command::{Command, Route, Shared};
use super::config::DraManagerConfig;
use super::connection::Channel;
use super::error::DraError;
use super::event::DraEvent;
use super::metrics::DraMetrics;
use super::service::{DraService, choose_health_service, choose_service};
use super::status::DraDriverStatus;
use crate::owner::{self, Mailbox};

/// The DRA manager has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the DRA manager is not running")]
pub struct DraManagerStopped;

/// Registers driver instances, prepares and unprepares claims, and reads the
/// DRA manager's state. Cheap to clone; valid while the manager runs.
#[derive(Clone)]
pub struct DraHandle {
    pub(crate) commands: Mailbox<Command>,
    pub(crate) shared: Arc<Shared>,
}

impl DraHandle {
    /// The settings.
    pub fn config(&self) -> &DraManagerConfig {
        &self.shared.config
    }

    /// The manager's metrics.
    pub fn metrics(&self) -> &DraMetrics {
        &self.shared.metrics
    }

    /// A counter that increases on every change, for waiting on state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes.clone()
    }

    /// Follows DRA events.
    pub fn events(&self) -> broadcast::Receiver<DraEvent> {
        self.shared.events.subscribe()
    }

    /// Registers an instance of `driver` serving at `endpoint`, using the
    /// first of `services` the agent supports. It starts a monitored
    /// connection and returns after the first connection attempt (a plugin
    /// that is not up yet is still registered, and connected when it is).
    pub async fn register(
        &self,
        driver: &str,
        endpoint: &str,
        services: &[String],
    ) -> Result<(), DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        let service = choose_service(services)?;
        let health_service = choose_health_service(services);
        if !endpoint.starts_with('/') {
            return Err(DraError::BadEndpoint {
                driver: driver.into(),
                endpoint: endpoint.into(),
            });
        }
        let (driver, endpoint) = (driver.to_string(), endpoint.to_string());
        let mut link = self
            .commands
            .ask(|reply| Command::Register {
                driver,
                endpoint,
                service,
                health_service,
                reply,
            })
            .await
            .unwrap_or(Err(DraError::Stopping))?;
        let _ = tokio::time::timeout(
            self.config().dial_timeout,
            link.wait_for(|l| l.attempts > 0),
        )
        .await;
        Ok(())
    }

    /// Removes the instance of `driver` at `endpoint`; unknown ones are
    /// ignored. Calls still running on it may finish; calls made after this
    /// returns go elsewhere.
    pub async fn deregister(&self, driver: &str, endpoint: &str) {
        let (driver, endpoint) = (driver.to_string(), endpoint.to_string());
        let _ = self
            .commands
            .ask(|reply| Command::Deregister {
                driver,
                endpoint,
                reply,
            })
            .await;
    }

    /// The instance calls for `driver` go to: its endpoint, service and channel.
    fn pick(&self, driver: &str) -> Result<Route, DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        if self.commands.is_closed() {
            return Err(DraError::Stopping);
        }
        self.shared
            .routes
            .borrow()
            .get(driver)
            .cloned()
            .ok_or_else(|| DraError::NotRegistered(driver.into()))
    }

    /// Prepares `claims` with `driver`'s instance in use. A failed call is an
    /// error; otherwise each claim has its own result.
    pub async fn prepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<PreparedClaim>, DraError> {
        self.call(driver, claims, Operation::Prepare, calls::prepare)
            .await
    }

    /// Unprepares `claims` with `driver`'s instance in use.
    pub async fn unprepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<UnpreparedClaim>, DraError> {
        self.call(driver, claims, Operation::Unprepare, calls::unprepare)
            .await
    }

    /// One call to the instance in use, timed in the metrics.
    async fn call<R: ClaimResult, F>(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        operation: Operation,
        call: impl FnOnce(Channel, DraService, Vec<ClaimRef>, Duration) -> F,
    ) -> Result<Vec<R>, DraError>
    where
        F: Future<Output = Result<Vec<R>, tonic::Status>>,
    {
        let Route {
            endpoint,
            service,
            channel,
            ..
        } = self.pick(driver)?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result = call(
            channel,
            service,
            claims.to_vec(),
            self.config().call_timeout,
        )
        .await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(ClaimResult::failed)),
            Err(status) => (status.code(), true),
        };
        let took = started.elapsed();
        self.shared
            .metrics
            .call(operation.metric_name(), driver, service, took, code, failed);
        result.map_err(|status| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: operation.rpc_name(),
            code: status.code(),
            message: status.message().into(),
        })
    }

    /// The drivers, sorted by name.
    pub async fn status(&self) -> Result<Vec<DraDriverStatus>, DraManagerStopped> {
        self.commands
            .ask(|reply| Command::Status { reply })
            .await
            .map_err(|_| DraManagerStopped)
    }

    /// Waits until the drivers satisfy `pred`, re-checking after every
    /// change, and returns them; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl FnMut(&[DraDriverStatus]) -> bool,
    ) -> Result<Option<Vec<DraDriverStatus>>, DraManagerStopped> {
        let read = || self.status();
        owner::wait_for(&self.shared.changes, timeout, DraManagerStopped, read, pred).await
    }
}

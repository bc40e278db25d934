//! What callers hold: a cheap handle to the DRA manager's task. Prepare and
//! unprepare run in the caller's task over the instance's connection; the
//! manager's task only says which instance to use.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::calls;
use super::claim::{ClaimRef, PreparedClaim, UnpreparedClaim};
use super::config::DraManagerConfig;
use super::connection::Channel;
use super::error::DraError;
use super::event::DraEvent;
use super::manager::Command;
use super::metrics::DraMetrics;
use super::service::{DraService, choose_health_service, choose_service};
use super::status::DraDriverStatus;

/// The DRA manager has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the DRA manager is not running")]
pub struct DraManagerStopped;

/// What the handle and the manager's task share.
pub(crate) struct Shared {
    pub(crate) config: DraManagerConfig,
    pub(crate) events: broadcast::Sender<DraEvent>,
    pub(crate) changes: watch::Receiver<u64>,
    pub(crate) metrics: DraMetrics,
}

/// Registers driver instances, prepares and unprepares claims, and reads the
/// DRA manager's state. Cheap to clone; valid while the manager runs.
#[derive(Clone)]
pub struct DraHandle {
    pub(crate) commands: mpsc::UnboundedSender<Command>,
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

    async fn ask<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, DraManagerStopped> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(request(reply))
            .map_err(|_| DraManagerStopped)?;
        answer.await.map_err(|_| DraManagerStopped)
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
    /// ignored. Calls still running on it may finish.
    pub fn deregister(&self, driver: &str, endpoint: &str) {
        let _ = self.commands.send(Command::Deregister {
            driver: driver.to_string(),
            endpoint: endpoint.to_string(),
        });
    }

    /// The instance calls for `driver` go to: its endpoint, service and channel.
    async fn pick(&self, driver: &str) -> Result<(String, DraService, Channel), DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        let driver = driver.to_string();
        self.ask(|reply| Command::Pick { driver, reply })
            .await
            .unwrap_or(Err(DraError::Stopping))
    }

    /// Prepares `claims` with `driver`'s instance in use. A failed call is an
    /// error; otherwise each claim has its own result.
    pub async fn prepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<PreparedClaim>, DraError> {
        let (endpoint, service, channel) = self.pick(driver).await?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result = calls::prepare(channel, service, claims, self.config().call_timeout).await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(|c| c.error.is_some())),
            Err(status) => (status.code(), true),
        };
        self.shared.metrics.call(
            "PrepareResources",
            driver,
            service,
            started.elapsed(),
            code,
            failed,
        );
        result.map_err(|status| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: "NodePrepareResources",
            code: status.code(),
            message: status.message().into(),
        })
    }

    /// Unprepares `claims` with `driver`'s instance in use.
    pub async fn unprepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<UnpreparedClaim>, DraError> {
        let (endpoint, service, channel) = self.pick(driver).await?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result = calls::unprepare(channel, service, claims, self.config().call_timeout).await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(|c| c.error.is_some())),
            Err(status) => (status.code(), true),
        };
        self.shared.metrics.call(
            "UnprepareResources",
            driver,
            service,
            started.elapsed(),
            code,
            failed,
        );
        result.map_err(|status| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: "NodeUnprepareResources",
            code: status.code(),
            message: status.message().into(),
        })
    }

    /// The drivers, sorted by name.
    pub async fn status(&self) -> Result<Vec<DraDriverStatus>, DraManagerStopped> {
        self.ask(|reply| Command::Status { reply }).await
    }

    /// Waits until the drivers satisfy `pred`, re-checking after every
    /// change, and returns them; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[DraDriverStatus]) -> bool,
    ) -> Result<Option<Vec<DraDriverStatus>>, DraManagerStopped> {
        let mut changes = self.changes();
        let deadline = Instant::now() + timeout;
        loop {
            changes.mark_unchanged();
            let drivers = self.status().await?;
            if pred(&drivers) {
                return Ok(Some(drivers));
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(DraManagerStopped),
                Err(_) => return Ok(None),
            }
        }
    }
}

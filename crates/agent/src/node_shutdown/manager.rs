//! The node shutdown manager's task, as the kubelet's (`nodeshutdown`):
//!
//! - at start, logind's longest inhibitor delay is read; when it is below
//!   the time asked for, logind's drop-in is written, logind told to read
//!   it, and the delay read again (100 ms doubling, five tries); still
//!   too short, the manager does not start (another drop-in may win);
//! - a `delay` lock is taken on the shutdown and `PrepareForShutdown`
//!   followed. On `true`: an Event on the Node, the node not ready
//!   (`node is shutting down`, written at once), pods due for admission
//!   refused, the active pods stopped group by group, lowest priority
//!   first, each pod with its group's grace period or its own
//!   `terminationGracePeriodSeconds` when shorter, each group waited for
//!   up to its grace period; then the lock is dropped and the node goes
//!   down. On `false` (the shutdown was cancelled): the node is ready
//!   again and the lock taken again;
//! - the bus lost, all of it starts again a second later; a start that
//!   fails is tried again with backoff (the kubelet gives up after its
//!   first failure; here logind may come up after the agent).

use std::os::fd::OwnedFd;
use std::time::Duration;

use futures::StreamExt;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{NodeShutdownConfig, PriorityGracePeriod, group_of};
use super::logind::{Logind, LogindError, write_drop_in};
use crate::pods::PodsHandle;

/// After the bus was lost, the next start.
const RECONNECT_PERIOD: Duration = Duration::from_secs(1);
/// After a failed start, the next (doubling).
const START_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// The checks that logind took the longer delay.
const DELAY_CHECKS: u32 = 5;

/// Why the manager did not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Logind(#[from] LogindError),
    #[error(
        "node shutdown manager was timed out after {DELAY_CHECKS} attempts waiting for logind InhibitDelayMaxSec to update to {requested:?} (ShutdownGracePeriod), current value is {current:?}"
    )]
    DelayTooShort {
        requested: Duration,
        current: Duration,
    },
}

/// Stops the node's pods before the node shuts down.
pub struct NodeShutdownManager {
    groups: Vec<PriorityGracePeriod>,
    config: NodeShutdownConfig,
    pods: PodsHandle,
    state: watch::Sender<bool>,
}

impl NodeShutdownManager {
    /// The manager of `config`, stopping the pods `pods` runs; `None` when
    /// `config` asks for no grace period (the manager is off).
    pub fn new(config: NodeShutdownConfig, pods: PodsHandle) -> Option<Self> {
        let groups = config.groups();
        if groups.is_empty() {
            return None;
        }
        Some(Self {
            groups,
            config,
            pods,
            state: watch::channel(false).0,
        })
    }

    /// Whether the node is shutting down, from now on: the Node's Ready
    /// condition follows it.
    pub fn shutting_down(&self) -> watch::Receiver<bool> {
        self.state.subscribe()
    }

    /// Follows logind until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        tracing::info!(groups = ?self.groups, "Creating node shutdown manager");
        let mut failures: Retry<String> = Retry::default();
        loop {
            let started = tokio::select! {
                () = stop.cancelled() => return,
                started = self.start() => started,
            };
            let wait = match started {
                Ok((logind, lock, signals)) => {
                    if failures.succeeded() == Said::Recovered {
                        tracing::info!("watching the node for shutdown events again");
                    }
                    self.follow(&logind, lock, signals, &stop).await;
                    if stop.is_cancelled() {
                        return;
                    }
                    RECONNECT_PERIOD
                }
                Err(e) => {
                    let text = e.to_string();
                    let now = Instant::now();
                    if failures.failed(text.clone(), &START_BACKOFF, now) == Said::NewError {
                        tracing::error!(error = %text, "Failed to start node shutdown manager; trying again with backoff");
                    } else {
                        tracing::debug!(error = %text, "node shutdown manager still not started");
                    }
                    failures
                        .due_at()
                        .map_or(RECONNECT_PERIOD, |at| at.saturating_duration_since(now))
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Connects, makes sure logind waits long enough, takes the lock and
    /// follows the signal.
    async fn start(
        &self,
    ) -> Result<
        (
            Logind,
            OwnedFd,
            impl futures::Stream<Item = bool> + Unpin + use<>,
        ),
        StartError,
    > {
        let logind = Logind::connect().await?;
        let requested = self.config.period_requested();
        let current = logind.inhibit_delay().await?;
        if requested > current {
            write_drop_in(&self.config.logind_config_dir, requested)?;
            logind.reload().await?;
            let mut current = current;
            let mut pause = Duration::from_millis(100);
            for _ in 0..DELAY_CHECKS {
                tokio::time::sleep(pause).await;
                pause *= 2;
                current = logind.inhibit_delay().await?;
                if requested <= current {
                    break;
                }
            }
            if requested > current {
                return Err(StartError::DelayTooShort { requested, current });
            }
        }
        let signals = logind.shutdown_signals().await?;
        let lock = logind.inhibit().await?;
        Ok((logind, lock, signals))
    }

    /// Follows `signals` until the bus is lost or `stop`.
    async fn follow(
        &self,
        logind: &Logind,
        lock: OwnedFd,
        mut signals: impl futures::Stream<Item = bool> + Unpin,
        stop: &CancellationToken,
    ) {
        let mut lock = Some(lock);
        loop {
            let signal = tokio::select! {
                () = stop.cancelled() => return,
                signal = signals.next() => signal,
            };
            match signal {
                None => {
                    tracing::error!("Ended to watching the node for shutdown events");
                    return;
                }
                Some(true) => {
                    tracing::info!(
                        "Shutdown manager detected new shutdown event: the node's pods are stopped"
                    );
                    self.pods.node_shutting_down(true);
                    self.state.send_replace(true);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = self.stop_pods() => {}
                    }
                    // The node may go down now.
                    drop(lock.take());
                    tracing::info!(
                        "Shutdown manager completed processing shutdown event, node will shutdown shortly"
                    );
                }
                Some(false) => {
                    tracing::info!("Shutdown manager detected shutdown cancellation");
                    self.pods.node_shutting_down(false);
                    self.state.send_replace(false);
                    match logind.inhibit().await {
                        Ok(new) => lock = Some(new),
                        Err(e) => {
                            tracing::error!(error = %e, "cannot take the shutdown inhibitor lock again")
                        }
                    }
                }
            }
        }
    }

    /// Stops the active pods, group by group.
    async fn stop_pods(&self) {
        let mut groups: Vec<Vec<(String, Duration)>> = vec![Vec::new(); self.groups.len()];
        for pod in self.pods.active_pods().await {
            let group = &self.groups[group_of(&self.groups, pod.priority)];
            let mut seconds = group.grace_period_seconds;
            if let Some(own) = pod.termination_grace_period
                && own <= seconds
            {
                seconds = own;
            }
            let grace = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
            groups[group_of(&self.groups, pod.priority)].push((pod.pod.uid.clone(), grace));
        }
        for (group, pods) in self.groups.iter().zip(groups) {
            if pods.is_empty() {
                continue;
            }
            let period =
                Duration::from_secs(u64::try_from(group.grace_period_seconds).unwrap_or(0));
            let count = pods.len();
            tokio::select! {
                () = self.pods.kill_for_shutdown(pods) => {
                    tracing::info!(priority = group.priority, pods = count, ?period, "Done waiting for all pods in group to terminate");
                }
                () = tokio::time::sleep(period) => {
                    tracing::info!(priority = group.priority, pods = count, ?period, "Shutdown manager pod killing time out");
                }
            }
        }
    }
}

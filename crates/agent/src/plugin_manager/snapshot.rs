//! What the plugin manager publishes after every change: an immutable
//! [`PluginSnapshot`] of its plugin table that readers (status, the admin
//! socket, metrics) read without asking the reconciler. Each row is shared
//! between snapshots and made again only when its socket path changed, in
//! shards ([`crate::common::shards`]) that are copied only when one of their rows
//! changed; the time left before a retry is worked out when read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::time::Instant;

use super::attempt_error::AttemptError;
use super::socket_retry::SocketRetry;
use super::state::{ActualState, DesiredState, Running};
use super::status::{PluginState, PluginStatus};
use crate::common::shards::{self, Published};
use crate::common::unix_time::unix_ms;
use crate::plugin_description::PluginDescription;

/// The plugin table after a change.
#[derive(Debug, Default, Clone)]
pub struct PluginSnapshot {
    /// Published by the running manager (the first snapshot, before it
    /// runs, is empty).
    running: bool,
    rows: Published<Row>,
}

/// One socket path's row, without the time left before its retry; its
/// error is made text only when shown.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) status: PluginStatus,
    pub(crate) retry_at: Option<Instant>,
    pub(crate) error: Option<Arc<AttemptError>>,
}

impl Row {
    /// The row of `path`, if the manager knows it.
    pub(crate) fn of(
        path: &Path,
        desired: &DesiredState,
        actual: &ActualState,
        running: &HashMap<PathBuf, Running>,
        backoff: &HashMap<PathBuf, SocketRetry>,
        pending_info: &HashMap<PathBuf, PluginDescription>,
    ) -> Option<Self> {
        let desired = desired.get(path);
        let actual = actual.get(path);
        let running = running.get(path);
        if desired.is_none() && actual.is_none() && running.is_none() {
            return None;
        }
        let backoff = backoff
            .get(path)
            .filter(|b| desired.map(|d| d.generation) == Some(b.generation));
        let info = actual.map(|a| &a.info).or_else(|| pending_info.get(path));
        let state = match (actual, running, backoff) {
            (Some(a), _, _) if desired.map(|d| d.generation) == Some(a.generation) => {
                PluginState::Registered
            }
            (Some(_), _, _) | (None, Some(Running::Unregister), _) => PluginState::Deregistering,
            (None, Some(Running::Register(_)), _) => PluginState::Pending,
            (None, None, Some(_)) => PluginState::Failed,
            (None, None, None) => PluginState::Pending,
        };
        let failed = state == PluginState::Failed;
        Some(Self {
            status: PluginStatus {
                socket_path: path.to_path_buf(),
                plugin_type: info.map(|i| i.plugin_type.clone()),
                name: info.map(|i| i.name.clone()),
                endpoint: info.map(|i| i.endpoint.clone()),
                versions: info.map(|i| i.versions.clone()).unwrap_or_default(),
                state,
                generation: desired
                    .map(|d| d.generation.0)
                    .or(actual.map(|a| a.generation.0))
                    .unwrap_or(0),
                registered_at_unix_ms: actual.map(|a| unix_ms(a.registered_at)),
                error: None,
                failures: backoff.map_or(0, |b| b.retry.failures()),
                retry_in_ms: None,
            },
            retry_at: backoff.filter(|_| failed).and_then(SocketRetry::retry_at),
            error: backoff
                .filter(|_| failed)
                .and_then(|b| b.retry.last_error().cloned()),
        })
    }
}

impl crate::published::Ready for PluginSnapshot {
    fn ready(&self) -> bool {
        self.running
    }
}

impl PluginSnapshot {
    /// A running manager's table.
    pub(crate) fn new(rows: Published<Row>) -> Self {
        Self {
            running: true,
            rows,
        }
    }

    /// Whether the manager was running when this was published.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The table as of `now`, sorted by socket path.
    pub fn status_at(&self, now: Instant) -> Vec<PluginStatus> {
        let mut table: Vec<PluginStatus> = shards::rows(&self.rows)
            .map(|row| PluginStatus {
                retry_in_ms: row
                    .retry_at
                    .map(|at| at.saturating_duration_since(now).as_millis() as u64),
                error: row.error.as_ref().map(ToString::to_string),
                ..row.status.clone()
            })
            .collect();
        table.sort_unstable_by(|a, b| a.socket_path.cmp(&b.socket_path));
        table
    }

    /// How many rows the table has.
    pub fn len(&self) -> usize {
        shards::rows(&self.rows).count()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

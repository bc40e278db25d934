//! What the plugin manager publishes after every change: an immutable
//! [`PluginSnapshot`] of its plugin table that readers (status, the admin
//! socket, metrics) read without asking the reconciler. Each row is shared
//! between snapshots and made again only when its socket path changed; the
//! time left before a retry is worked out when read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::time::Instant;

use super::status::PluginStatus;

/// The plugin table after a change.
#[derive(Debug, Default, Clone)]
pub struct PluginSnapshot {
    /// Published by the running manager (the first snapshot, before it
    /// runs, is empty).
    running: bool,
    rows: Arc<BTreeMap<PathBuf, Arc<Row>>>,
}

/// One socket path's row, without the time left before its retry.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) status: PluginStatus,
    pub(crate) retry_at: Option<Instant>,
}

impl PluginSnapshot {
    /// A running manager's table.
    pub(crate) fn new(rows: Arc<BTreeMap<PathBuf, Arc<Row>>>) -> Self {
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
        self.rows
            .values()
            .map(|row| PluginStatus {
                retry_in_ms: row
                    .retry_at
                    .map(|at| at.saturating_duration_since(now).as_millis() as u64),
                ..row.status.clone()
            })
            .collect()
    }

    /// How many rows the table has.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

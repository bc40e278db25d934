//! What reaches the reconciler besides watch events: a running
//! operation's progress (the plugin's GetInfo answer, before its handler
//! is called) and a request for a status snapshot.

use std::path::PathBuf;

use tokio::sync::oneshot;

use super::state::{Generation, PluginDescription};
use super::status::PluginStatus;

/// Requests from outside and progress reports from running operations.
pub(crate) enum Control {
    Progress {
        path: PathBuf,
        generation: Generation,
        info: PluginDescription,
    },
    Snapshot(oneshot::Sender<Vec<PluginStatus>>),
}

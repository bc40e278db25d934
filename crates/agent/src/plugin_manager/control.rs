//! What reaches the reconciler besides watch events: a running
//! operation's progress (the plugin's GetInfo answer, before its handler
//! is called).

use std::path::PathBuf;

use super::state::Generation;
use crate::plugin_description::PluginDescription;

/// Progress reports from running operations.
pub(crate) enum Control {
    Progress {
        path: PathBuf,
        generation: Generation,
        info: PluginDescription,
    },
}

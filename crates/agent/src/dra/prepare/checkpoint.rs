//! The claims prepared on this node, on disk: the records of
//! [`crate::dra::prepare::records`] in a checkpoint written like the device checkpoint
//! ([`crate::checkpoint`]): atomic, checksummed, with a backup.

use std::path::Path;
use tokio_util::task::TaskTracker;

use crate::checkpoint::{CheckpointFile, Ends, Persister};
use crate::dra::prepare::records::{PreparedClaims, RecordedClaim};

/// The checkpoint's file name in the agent's state directory.
pub const CHECKPOINT_FILE: &str = "nodeplugins_dra_checkpoint";
/// The backup's file name: the same bytes, written right after the checkpoint.
pub const BACKUP_FILE: &str = "nodeplugins_dra_checkpoint.backup";

/// What the DRA checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraCheckpoint {
    /// Every recorded claim, once per driver that prepared it.
    pub claims: Vec<RecordedClaim>,
}

impl DraCheckpoint {
    /// What the checkpoint of `claims` holds.
    pub(crate) fn of(claims: &PreparedClaims) -> Self {
        Self {
            claims: claims.list(),
        }
    }
}

/// The DRA checkpoint and its backup in the state directory `dir`.
pub(crate) fn file(dir: &Path) -> CheckpointFile {
    CheckpointFile::new(
        "DRA claims checkpoint",
        dir.join(CHECKPOINT_FILE),
        dir.join(BACKUP_FILE),
    )
}

/// The prepared claims checkpointed in `dir` (none when the checkpoint is
/// unreadable, which the persister reports), and the persister that keeps
/// them there, on `tasks`, with the ends of its writes.
pub(crate) async fn open(
    dir: &Path,
    tasks: &TaskTracker,
) -> (Persister<DraCheckpoint>, Ends, PreparedClaims) {
    if let Err(e) = crate::common::private_dir::create_private_dir(dir) {
        tracing::error!(dir = %dir.display(), error = %e, "cannot create the DRA state directory");
    }
    let (persister, ends, loaded) = Persister::open::<DraCheckpoint>(file(dir), tasks).await;
    let claims = loaded
        .map(|loaded| PreparedClaims::restore(loaded.claims))
        .unwrap_or_default();
    tracing::info!(
        claims = claims.list().len(),
        "DRA claims checkpoint restored"
    );
    (persister, ends, claims)
}

#[cfg(test)]
mod tests;

//! The claims prepared on this node, on disk: the records of
//! [`super::records`] in a checkpoint written like the device checkpoint
//! ([`crate::checkpoint`]): atomic, checksummed, with a backup.

use std::path::Path;
use std::sync::Arc;

use super::records::{PreparedClaims, RecordedClaim};
use crate::checkpoint::{CheckpointFile, CheckpointProblem};

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

/// The prepared claims checkpointed in `dir`, and what was wrong with the
/// checkpoint if anything was.
pub(crate) async fn load(dir: &Path) -> (PreparedClaims, Option<CheckpointProblem>) {
    if let Err(e) = crate::private_dir::create_private_dir(dir) {
        tracing::error!(dir = %dir.display(), error = %e, "cannot create the DRA state directory");
    }
    let file = file(dir);
    match tokio::task::spawn_blocking(move || file.load::<DraCheckpoint>()).await {
        Ok(Ok(loaded)) => {
            let problem = loaded.recovered.map(|recovered| {
                tracing::warn!("{recovered}");
                CheckpointProblem::Recovered(Arc::new(recovered))
            });
            let claims = PreparedClaims::restore(loaded.data.claims);
            tracing::info!(
                claims = claims.list().len(),
                "DRA claims checkpoint restored"
            );
            (claims, problem)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "DRA claims checkpoint not restored");
            (
                PreparedClaims::default(),
                Some(CheckpointProblem::Unreadable(Arc::new(e))),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "DRA claims checkpoint not restored");
            (PreparedClaims::default(), None)
        }
    }
}

#[cfg(test)]
mod tests;

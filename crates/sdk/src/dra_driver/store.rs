//! What each prepared claim got, kept across driver restarts in a
//! checkpoint (atomic, checksummed, with a backup; see
//! [`nodeplugins_api::checkpoint`]) in the driver's state directory. The
//! file is read and written under the serialization lock of each call, so
//! the instances of a rolling update share it.

use std::collections::BTreeMap;
use std::path::Path;

use nodeplugins_api::checkpoint::{CheckpointError, CheckpointFile};

use super::claim::PreparedClaim;

/// The store's file name in the state directory.
pub const STORE_FILE: &str = "nodeplugins_prepared_claims";
/// The backup's file name.
pub const STORE_BACKUP_FILE: &str = "nodeplugins_prepared_claims.backup";

/// Claim UID → what it got.
pub(crate) type Prepared = BTreeMap<String, PreparedClaim>;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Stored {
    claims: Vec<PreparedClaim>,
}

/// The prepared claims, on disk or (without a state directory) in memory.
pub(crate) enum ClaimStore {
    Memory(tokio::sync::Mutex<Prepared>),
    File(CheckpointFile),
}

/// The prepared claims as a call reads and changes them: in memory, the
/// store's own map, held locked (changed in place, never copied); from a
/// file, what it held.
pub(crate) enum Loaded<'a> {
    Memory(tokio::sync::MutexGuard<'a, Prepared>),
    File(Prepared),
}

impl std::ops::Deref for Loaded<'_> {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        match self {
            Self::Memory(claims) => claims,
            Self::File(claims) => claims,
        }
    }
}

impl std::ops::DerefMut for Loaded<'_> {
    fn deref_mut(&mut self) -> &mut Prepared {
        match self {
            Self::Memory(claims) => claims,
            Self::File(claims) => claims,
        }
    }
}

impl ClaimStore {
    /// A store in `dir`, or in memory.
    pub(crate) fn new(dir: Option<&Path>) -> Self {
        match dir {
            None => Self::Memory(Default::default()),
            Some(dir) => Self::File(CheckpointFile::new(
                "prepared claims",
                dir.join(STORE_FILE),
                dir.join(STORE_BACKUP_FILE),
            )),
        }
    }

    /// The prepared claims. A damaged file is moved aside and reported, and
    /// the claims start empty.
    pub(crate) async fn load(&self) -> Result<Loaded<'_>, CheckpointError> {
        match self {
            Self::Memory(claims) => Ok(Loaded::Memory(claims.lock().await)),
            Self::File(file) => {
                let (file, fallback) = (file.clone(), file.clone());
                let loaded = tokio::task::spawn_blocking(move || file.load::<Stored>())
                    .await
                    .unwrap_or_else(|e| Err(fallback.io(std::io::Error::other(e))));
                let loaded = match loaded {
                    Ok(loaded) => loaded,
                    Err(e @ CheckpointError::Corrupt { .. }) => {
                        tracing::error!(error = %e, "prepared claims lost");
                        return Ok(Loaded::File(Prepared::new()));
                    }
                    Err(e) => return Err(e),
                };
                if let Some(recovered) = loaded.recovered {
                    tracing::warn!("{recovered}");
                }
                Ok(Loaded::File(
                    loaded
                        .data
                        .claims
                        .into_iter()
                        .map(|c| (c.claim.uid.clone(), c))
                        .collect(),
                ))
            }
        }
    }

    /// Stores `claims` as loaded and changed: a file is written; the map in
    /// memory was changed in place.
    pub(crate) async fn save(&self, claims: &Loaded<'_>) -> Result<(), CheckpointError> {
        match (self, claims) {
            (_, Loaded::Memory(_)) | (Self::Memory(_), _) => Ok(()),
            (Self::File(file), Loaded::File(claims)) => {
                let file = file.clone();
                let stored = Stored {
                    claims: claims.values().cloned().collect(),
                };
                let fallback = file.clone();
                tokio::task::spawn_blocking(move || file.write(&stored))
                    .await
                    .unwrap_or_else(|e| Err(fallback.io(std::io::Error::other(e))))
            }
        }
    }
}

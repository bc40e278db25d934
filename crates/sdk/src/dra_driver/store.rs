//! What each prepared claim got, kept across driver restarts in a
//! checkpoint (atomic, checksummed, with a backup; see
//! [`nodeplugins_api::checkpoint`]) in the driver's state directory.
//!
//! Every change is a read-modify-write under the store's own lock: a mutex
//! within the process, and an exclusive lock on
//! `<state dir>/nodeplugins_prepared_claims.lock` across the processes that
//! share the directory (the instances of a rolling update), whether or not
//! calls are serialized. A change that cannot be written is an error for
//! the caller, which fails the claims it concerned.
//!
//! Changes are committed in groups: the changes that arrive while one
//! write runs are applied together, in the order they came, on one read of
//! the file, and written once; each caller hears once its change is on
//! disk (or that the group's write failed, which changed nothing). So
//! concurrent calls, serialized or not, share their fsyncs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;

use nodeplugins_api::checkpoint::{CheckpointError, CheckpointFile};

use super::claim::PreparedClaim;
use super::claim_uid::ClaimUid;

/// The store's file name in the state directory.
pub const STORE_FILE: &str = "nodeplugins_prepared_claims";
/// The backup's file name.
pub const STORE_BACKUP_FILE: &str = "nodeplugins_prepared_claims.backup";
/// The lock file held during each read-modify-write of the store.
pub const STORE_LOCK_FILE: &str = "nodeplugins_prepared_claims.lock";

/// Claim UID → what it got.
pub(crate) type Prepared = BTreeMap<ClaimUid, PreparedClaim>;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Stored {
    claims: Vec<PreparedClaim>,
}

/// Why the store could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The file could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The lock file could not be opened or locked.
    #[error("cannot lock {path:?}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The blocking task doing the work failed.
    #[error("the store's task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The write of the group the change was in failed.
    #[error(transparent)]
    Group(Arc<StoreError>),
    /// The group the change was in ended without saying how its write went.
    #[error("the write of the prepared claims ended without an answer")]
    Unanswered,
}

/// A change waiting for the next group's write: applied in order with the
/// others; says whether it changed anything.
type Change = Box<dyn FnOnce(&mut Prepared) -> bool + Send>;

/// A change and where to say how its group's write went.
struct Pending {
    change: Change,
    done: oneshot::Sender<Result<(), Arc<StoreError>>>,
}

/// The prepared claims, on disk or (without a state directory) in memory.
pub(crate) struct ClaimStore {
    /// Held while a group is taken and written within this process.
    lock: tokio::sync::Mutex<()>,
    /// Changes waiting for the next group.
    pending: std::sync::Mutex<Vec<Pending>>,
    /// How many times the file was written.
    writes: Arc<AtomicU64>,
    kind: Kind,
}

enum Kind {
    Memory(std::sync::Mutex<Prepared>),
    File {
        file: Arc<CheckpointFile>,
        lock_path: PathBuf,
    },
}

impl ClaimStore {
    /// A store in `dir`, or in memory.
    pub(crate) fn new(dir: Option<&Path>) -> Self {
        let kind = match dir {
            None => Kind::Memory(Default::default()),
            Some(dir) => Kind::File {
                file: Arc::new(CheckpointFile::new(
                    "prepared claims",
                    dir.join(STORE_FILE),
                    dir.join(STORE_BACKUP_FILE),
                )),
                lock_path: dir.join(STORE_LOCK_FILE),
            },
        };
        Self {
            lock: tokio::sync::Mutex::new(()),
            pending: std::sync::Mutex::new(Vec::new()),
            writes: Arc::new(AtomicU64::new(0)),
            kind,
        }
    }

    /// The prepared claims as they are now. Each write replaces the file
    /// whole, by a rename, so a read needs no lock; and a read never writes
    /// (a damaged file is read from its backup and left for the writer,
    /// under its lock, to repair), so it never races a writer.
    pub(crate) async fn read(&self) -> Result<Prepared, StoreError> {
        match &self.kind {
            Kind::Memory(claims) => Ok(lock(claims).clone()),
            Kind::File { file, .. } => {
                let file = file.clone();
                tokio::task::spawn_blocking(move || read(&file))
                    .await
                    .map_err(StoreError::Task)?
            }
        }
    }

    /// Changes the claims with `change`, which says whether it changed
    /// anything (only then is the file written), under the store's locks,
    /// in a group with the changes waiting beside it. An error means
    /// nothing was changed on disk.
    pub(crate) async fn update<R, F>(&self, change: F) -> Result<R, StoreError>
    where
        F: FnOnce(&mut Prepared) -> (R, bool) + Send + 'static,
        R: Send + 'static,
    {
        let (file, lock_path) = match &self.kind {
            Kind::Memory(claims) => {
                let _held = self.lock.lock().await;
                return Ok(change(&mut lock(claims)).0);
            }
            Kind::File { file, lock_path } => (file.clone(), lock_path.clone()),
        };
        let slot = Arc::new(std::sync::Mutex::new(None));
        let result = slot.clone();
        let (done, written) = oneshot::channel();
        let change: Change = Box::new(move |claims| {
            let (value, changed) = change(claims);
            *lock(&result) = Some(value);
            changed
        });
        self.pending_changes().push(Pending { change, done });
        {
            let _held = self.lock.lock().await;
            // Empty when an earlier group took this change.
            let group = std::mem::take(&mut *self.pending_changes());
            if !group.is_empty() {
                let writes = self.writes.clone();
                // The group is answered from the blocking task, so that it
                // is answered even if this call goes away meanwhile.
                let task = tokio::task::spawn_blocking(move || {
                    commit(&file, &lock_path, &writes, group);
                });
                task.await.map_err(StoreError::Task)?;
            }
        }
        match written.await {
            Ok(Ok(())) => lock(&slot).take().ok_or(StoreError::Unanswered),
            Ok(Err(error)) => Err(StoreError::Group(error)),
            Err(_) => Err(StoreError::Unanswered),
        }
    }

    /// How many times the file was written.
    #[cfg(test)]
    fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn pending_changes(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Applies `group` in order on one read of `file` and writes it once, under
/// the lock file (blocking); tells each change how it went.
fn commit(file: &CheckpointFile, lock_path: &Path, writes: &AtomicU64, group: Vec<Pending>) {
    let (changes, done): (Vec<Change>, Vec<_>) =
        group.into_iter().map(|p| (p.change, p.done)).unzip();
    let written = (|| {
        // Released when `_locked` is closed, at the end.
        let _locked = lock_file(lock_path)?;
        let mut claims = load(file)?;
        let mut changed = false;
        for change in changes {
            changed |= change(&mut claims);
        }
        if changed {
            let stored = Stored {
                claims: claims.into_values().collect(),
            };
            file.write(&stored)?;
            writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok::<_, StoreError>(())
    })();
    let written = written.map_err(Arc::new);
    for done in done {
        let _ = done.send(written.clone());
    }
}

fn lock<T>(value: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    value
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Opens and exclusively locks `path` (blocking): the lock goes with the
/// returned file.
fn lock_file(path: &Path) -> Result<std::fs::File, StoreError> {
    let locked = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .and_then(|file| file.lock().map(|()| file));
    locked.map_err(|source| StoreError::Lock {
        path: path.to_owned(),
        source,
    })
}

/// The claims in `file` (blocking), without changing anything on disk.
fn read(file: &CheckpointFile) -> Result<Prepared, StoreError> {
    let stored: Stored = file.read()?;
    Ok(by_uid(stored))
}

fn by_uid(stored: Stored) -> Prepared {
    stored
        .claims
        .into_iter()
        .map(|c| (c.claim.uid.clone(), c))
        .collect()
}

/// The claims in `file` as its writer reads them, under the store's locks
/// (blocking). A damaged file is moved aside and reported, and the claims
/// start empty.
fn load(file: &CheckpointFile) -> Result<Prepared, StoreError> {
    let loaded = match file.load::<Stored>() {
        Ok(loaded) => loaded,
        Err(e @ CheckpointError::Corrupt { .. }) => {
            tracing::error!(error = %e, "prepared claims lost");
            return Ok(Prepared::new());
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(recovered) = loaded.recovered {
        tracing::warn!("{recovered}");
    }
    Ok(by_uid(loaded.data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra_driver::{ClaimRef, PreparedState};

    fn record(uid: &str) -> PreparedClaim {
        PreparedClaim {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: uid.into(),
                uid: uid.into(),
            },
            devices: Vec::new(),
            state: PreparedState::Prepared,
            boot_id: None,
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn concurrent_changes_are_each_kept() {
        let dir = tempfile::tempdir().unwrap();
        // Two stores on one directory: two instances of a rolling update.
        let stores = [
            Arc::new(ClaimStore::new(Some(dir.path()))),
            Arc::new(ClaimStore::new(Some(dir.path()))),
        ];
        let changes = (0..40).map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                let uid = format!("claim-{i}");
                store
                    .update(move |claims| {
                        claims.insert(uid.as_str().into(), record(&uid));
                        ((), true)
                    })
                    .await
                    .unwrap();
            })
        });
        for change in futures::future::join_all(changes).await {
            change.unwrap();
        }
        assert_eq!(stores[0].read().await.unwrap().len(), 40);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn changes_made_at_once_are_written_in_groups_each_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ClaimStore::new(Some(dir.path())));
        let changes = (0..100).map(|i| {
            let store = store.clone();
            async move {
                let uid = format!("claim-{i}");
                store
                    .update(move |claims| {
                        claims.insert(uid.as_str().into(), record(&uid));
                        (i, true)
                    })
                    .await
            }
        });
        let results = futures::future::join_all(changes).await;
        for (i, result) in results.into_iter().enumerate() {
            assert_eq!(result.unwrap(), i, "each caller gets its own result");
        }
        assert_eq!(store.read().await.unwrap().len(), 100);
        let writes = store.writes();
        assert!(writes < 100, "{writes} writes for 100 changes");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn reads_beside_writers_never_fail_and_never_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ClaimStore::new(Some(dir.path())));
        // A backup that differs from the checkpoint: a read that repaired
        // it would race the writers for the file names.
        store
            .update(|claims| {
                claims.insert("seed".into(), record("seed"));
                ((), true)
            })
            .await
            .unwrap();
        std::fs::write(dir.path().join(STORE_BACKUP_FILE), b"stale").unwrap();
        let work = (0..100).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let uid = format!("claim-{i}");
                    store
                        .update(move |claims| {
                            claims.insert(uid.as_str().into(), record(&uid));
                            ((), true)
                        })
                        .await
                        .map(|()| 0)
                } else {
                    store.read().await.map(|claims| claims.len())
                }
            })
        });
        for done in futures::future::join_all(work).await {
            done.unwrap().unwrap();
        }
        assert_eq!(store.read().await.unwrap().len(), 51);
    }

    #[tokio::test]
    async fn a_change_that_cannot_be_made_on_disk_is_an_error_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = ClaimStore::new(Some(dir.path()));
        store
            .update(|claims| {
                claims.insert("a".into(), record("a"));
                ((), true)
            })
            .await
            .unwrap();
        // The backup's name taken by a directory that is not empty: it can
        // be neither read nor replaced.
        let backup = dir.path().join(STORE_BACKUP_FILE);
        std::fs::remove_file(&backup).unwrap();
        std::fs::create_dir(&backup).unwrap();
        std::fs::write(backup.join("keep"), b"x").unwrap();
        let failed = store
            .update(|claims| {
                claims.insert("b".into(), record("b"));
                ((), true)
            })
            .await;
        assert!(failed.is_err());
        let kept: Vec<ClaimUid> = store.read().await.unwrap().into_keys().collect();
        assert_eq!(kept, ["a"]);
    }
}

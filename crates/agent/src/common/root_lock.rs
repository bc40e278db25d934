//! One agent per root directory: an exclusive lock on
//! `<root>/nodeplugins/agent.lock`, taken before the agent touches anything
//! under the root, and held until it stops. A second agent on the same root
//! refuses to start, naming the holder's pid, and changes nothing: without
//! the lock its start-up cleanup would delete the first agent's device
//! plugin sockets.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::admin::ADMIN_DIR;

/// The lock file's name in `<root>/nodeplugins`.
pub(crate) const LOCK_FILE: &str = "agent.lock";

/// Why the root could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum RootLockError {
    /// Another agent holds the lock.
    #[error("root directory {root:?} is in use by another nodeplugins agent{}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Busy {
        /// The root directory.
        root: PathBuf,
        /// The holder's pid, as it wrote it.
        pid: Option<u32>,
    },
    /// The lock file could not be created or locked.
    #[error("cannot lock root directory {root:?} ({path:?}): {source}")]
    Io {
        /// The root directory.
        root: PathBuf,
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the root.
#[derive(Debug)]
pub(crate) struct RootLock {
    _file: File,
}

impl RootLock {
    /// Locks `root` for this process, creating `<root>/nodeplugins` (mode
    /// 0700) if needed, and records this process's pid in the lock file.
    pub(crate) fn acquire(root: &Path) -> Result<Self, RootLockError> {
        let dir = root.join(ADMIN_DIR);
        let path = dir.join(LOCK_FILE);
        let io = |source| RootLockError::Io {
            root: root.to_owned(),
            path: path.clone(),
            source,
        };
        crate::common::private_dir::create_private_dir(&dir).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(RootLockError::Busy {
                    root: root.to_owned(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_root_is_refused_with_the_holders_pid() {
        let root = tempfile::tempdir().unwrap();
        let held = RootLock::acquire(root.path()).unwrap();
        let error = RootLock::acquire(root.path()).unwrap_err();
        let pid = std::process::id();
        assert!(
            matches!(error, RootLockError::Busy { pid: Some(p), .. } if p == pid),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "root directory {:?} is in use by another nodeplugins agent (pid {pid})",
                root.path()
            )
        );
        drop(held);
        RootLock::acquire(root.path()).expect("free again once released");
    }
}

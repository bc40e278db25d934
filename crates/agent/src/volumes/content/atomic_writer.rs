//! The kubelet's atomic writer (`AtomicWriter.Write`): a volume's files
//! are replaced all at once, so that a container never reads half of an
//! update. The files live in a timestamped directory
//! (`..2026_12_02_10_00_00.<random>`, 0755); `..data` is a symlink to it,
//! swapped by a rename; each top-level name the container sees is a
//! symlink through `..data`. Unchanged content only makes sure the
//! user-visible links exist (a writer stopped between the swap and the
//! links leaves them missing otherwise).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The symlink to the current files.
const DATA: &str = "..data";
/// The new symlink, before its rename.
const DATA_TMP: &str = "..data_tmp";
/// The mode of a timestamped directory.
const TS_DIR_MODE: u32 = 0o755;

/// One file of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileProjection {
    /// Its bytes.
    pub(crate) data: Vec<u8>,
    /// Its exact mode (the umask does not apply).
    pub(crate) mode: u32,
    /// Its owner, when the pod's containers run as one user (`FsUser`).
    pub(crate) fs_user: Option<u32>,
}

/// A volume's files, by their path in it.
pub(crate) type Payload = BTreeMap<String, FileProjection>;

/// Why a volume's files could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// A path the payload names is absolute, empty or climbs out.
    #[error(
        "invalid path {0:?}: a file's path is relative, and no element of it starts with \"..\""
    )]
    InvalidPath(String),
    /// The file system refused.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> WriteError + 'a {
    move |source| WriteError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `payload` into volume directory `dir` as the kubelet does;
/// `set_perms` runs over the new timestamped directory before it is made
/// current (the pod's fsGroup). Returns whether anything changed.
pub(crate) fn write(
    dir: &Path,
    payload: &Payload,
    set_perms: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<bool, WriteError> {
    for path in payload.keys() {
        validate(path)?;
    }
    let data_link = dir.join(DATA);
    let old_ts = std::fs::read_link(&data_link)
        .ok()
        .map(|target| dir.join(target));
    let old_paths = match &old_ts {
        Some(old) => files_under(old),
        None => BTreeSet::new(),
    };
    let unchanged = old_ts
        .as_deref()
        .is_some_and(|old| same_content(old, payload, &old_paths));
    if unchanged {
        make_user_links(dir, payload)?;
        return Ok(false);
    }
    let ts_dir = new_ts_dir(dir)?;
    for (path, file) in payload {
        let target = ts_dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io("cannot make", parent))?;
        }
        std::fs::write(&target, &file.data).map_err(io("cannot write", &target))?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(file.mode))
            .map_err(io("cannot set the mode of", &target))?;
        if let Some(user) = file.fs_user {
            std::os::unix::fs::lchown(&target, Some(user), None)
                .map_err(io("cannot set the owner of", &target))?;
        }
    }
    set_perms(&ts_dir).map_err(io("cannot set the ownership of", &ts_dir))?;
    let ts_name = ts_dir
        .file_name()
        .map(|n| PathBuf::from(n.to_os_string()))
        .unwrap_or_default();
    let tmp_link = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&ts_name, &tmp_link).map_err(io("cannot link", &tmp_link))?;
    std::fs::rename(&tmp_link, &data_link).map_err(io("cannot swap", &data_link))?;
    make_user_links(dir, payload)?;
    // The names that went away, then the old files.
    let new_tops: BTreeSet<String> = payload.keys().map(|p| top_level(p)).collect();
    for old in &old_paths {
        let top = top_level(old);
        if !new_tops.contains(&top) {
            let link = dir.join(&top);
            if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&link).map_err(io("cannot remove", &link))?;
            }
        }
    }
    if let Some(old) = old_ts
        && old != ts_dir
    {
        std::fs::remove_dir_all(&old).map_err(io("cannot remove", &old))?;
    }
    Ok(true)
}

/// Refuses an absolute path, an empty one, and any element starting with
/// `..`.
fn validate(path: &str) -> Result<(), WriteError> {
    let invalid = || WriteError::InvalidPath(path.to_string());
    if path.is_empty() || path.starts_with('/') {
        return Err(invalid());
    }
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) if !part.to_string_lossy().starts_with("..") => {}
            _ => return Err(invalid()),
        }
    }
    Ok(())
}

/// A path's first element.
fn top_level(path: &str) -> String {
    path.split('/').next().unwrap_or(path).to_string()
}

/// A new timestamped directory in `dir` (UTC, then a random suffix).
fn new_ts_dir(dir: &Path) -> Result<PathBuf, WriteError> {
    let stamp = k8s_openapi::jiff::Timestamp::now().strftime("%Y_%m_%d_%H_%M_%S");
    loop {
        let path = dir.join(format!("..{stamp}.{}", rand::random::<u32>()));
        match std::fs::create_dir(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(TS_DIR_MODE))
                    .map_err(io("cannot set the mode of", &path))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("cannot make", &path)(e)),
        }
    }
}

/// The files under `dir`, by their path in it.
fn files_under(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &path, out);
            } else if let Ok(relative) = path.strip_prefix(root) {
                out.insert(relative.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// Whether `old` holds exactly `payload`: the same paths, bytes and modes.
fn same_content(old: &Path, payload: &Payload, old_paths: &BTreeSet<String>) -> bool {
    if old_paths.len() != payload.len() {
        return false;
    }
    payload.iter().all(|(path, file)| {
        let target = old.join(path);
        std::fs::read(&target).is_ok_and(|data| data == file.data)
            && std::fs::metadata(&target)
                .is_ok_and(|m| m.permissions().mode() & 0o7777 == file.mode)
    })
}

/// Makes each top-level name of `payload` a symlink through `..data`,
/// where it is not one already.
fn make_user_links(dir: &Path, payload: &Payload) -> Result<(), WriteError> {
    let tops: BTreeSet<String> = payload.keys().map(|p| top_level(p)).collect();
    for top in tops {
        let link = dir.join(&top);
        if std::fs::symlink_metadata(&link).is_ok() {
            continue;
        }
        let target = Path::new(DATA).join(&top);
        std::os::unix::fs::symlink(&target, &link).map_err(io("cannot link", &link))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
            fs_user: None,
        }
    }

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| (p.to_string(), file(d, *m)))
            .collect()
    }

    #[test]
    fn files_appear_through_data_with_their_exact_modes() {
        let dir = tempfile::tempdir().unwrap();
        let changed = write(
            dir.path(),
            &payload(&[("ca.crt", "CA", 0o644), ("sub/token", "T", 0o600)]),
            |_| Ok(()),
        )
        .unwrap();
        assert!(changed);
        let data = std::fs::read_link(dir.path().join("..data")).unwrap();
        let ts = data.to_string_lossy().into_owned();
        assert!(
            ts.starts_with("..") && ts.len() > "..2026_12_02_10_00_00.".len(),
            "{ts}"
        );
        let ts_mode = std::fs::metadata(dir.path().join(&ts))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(ts_mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(dir.path().join("ca.crt")).unwrap(),
            Path::new("..data/ca.crt")
        );
        assert_eq!(
            std::fs::read_link(dir.path().join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/token")).unwrap(),
            "T"
        );
        let mode = std::fs::metadata(dir.path().join("sub/token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_update_swaps_everything_at_once_and_drops_what_went() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &payload(&[("a", "1", 0o644), ("b", "2", 0o644)]),
            |_| Ok(()),
        )
        .unwrap();
        let first = std::fs::read_link(dir.path().join("..data")).unwrap();
        assert!(
            !write(
                dir.path(),
                &payload(&[("a", "1", 0o644), ("b", "2", 0o644)]),
                |_| Ok(())
            )
            .unwrap(),
            "the same content writes nothing"
        );
        assert_eq!(
            std::fs::read_link(dir.path().join("..data")).unwrap(),
            first
        );
        write(dir.path(), &payload(&[("a", "3", 0o644)]), |_| Ok(())).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).unwrap(), "3");
        assert!(
            std::fs::symlink_metadata(dir.path().join("b")).is_err(),
            "b went"
        );
        assert!(
            !dir.path().join(&first).exists(),
            "the old files are removed"
        );
        let entries: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            entries.len(),
            3,
            "{entries:?}: a, ..data and one timestamped directory"
        );
    }

    #[test]
    fn links_missing_after_an_interrupted_write_are_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let files = payload(&[("namespace", "ns", 0o644)]);
        write(dir.path(), &files, |_| Ok(())).unwrap();
        std::fs::remove_file(dir.path().join("namespace")).unwrap();
        assert!(!write(dir.path(), &files, |_| Ok(())).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("namespace")).unwrap(),
            "ns"
        );
    }

    #[test]
    fn paths_that_climb_out_or_are_absolute_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["/etc/passwd", "../x", "a/../../x", "..data", ""] {
            let err = write(dir.path(), &payload(&[(bad, "x", 0o644)]), |_| Ok(())).unwrap_err();
            assert!(matches!(err, WriteError::InvalidPath(_)), "{bad}");
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "nothing written"
        );
    }
}

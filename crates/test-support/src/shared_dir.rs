//! A temporary directory every user can enter, for tests that act as
//! another user: the checkout (and its `target/`) may sit under a directory
//! only its owner can enter, as `/root` is (mode 0700), and `TMPDIR` may
//! too, so a test that runs a program as another user copies it here.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// Where to look, in order: the temporary directory the tests were given,
/// then the system's usual ones.
const CANDIDATES: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// A new directory (mode 0755) whose every ancestor other users may pass
/// through, removed when dropped: under `TMPDIR` if that allows it, else
/// under the first of `/tmp`, `/var/tmp` and `/dev/shm` that does.
pub fn shared_tempdir() -> TempDir {
    let mut candidates = vec![std::env::temp_dir()];
    candidates.extend(CANDIDATES.iter().map(PathBuf::from));
    let parent = candidates
        .into_iter()
        .find(|dir| dir.is_dir() && others_can_enter(dir))
        .expect(
            "no temporary directory that other users can enter (TMPDIR, /tmp, /var/tmp, /dev/shm)",
        );
    let dir = tempfile::Builder::new()
        .prefix("nodeplugins-shared-")
        .tempdir_in(&parent)
        .expect("create a shared temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("open the shared temporary directory to others");
    dir
}

/// Copies the program at `program` into `dir`, executable by everyone, and
/// returns the copy's path.
pub fn copy_program(program: &Path, dir: &Path) -> PathBuf {
    let name = program.file_name().expect("a program's file name");
    let copy = dir.join(name);
    std::fs::copy(program, &copy)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", program.display(), copy.display()));
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
        .expect("make the copy executable by everyone");
    copy
}

/// Whether a user other than the owner may pass through `dir` and each of
/// its ancestors (their execute bit for others is set).
fn others_can_enter(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

//! Workspace binaries for end-to-end tests in any crate: built on first use
//! (a no-op when the workspace is already built) and found in the target dir.
//!
//! `scripts/run-tests` builds every binary and example before any test
//! runs and says so in [`PREBUILT_ENV`]: the tests then take them as they
//! are, without a `cargo build` each, which would wait for the target
//! directory's lock while another cargo (the background checks of
//! `scripts/tool-checks`) holds it, in the middle of a timed test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

fn target_profile_dir() -> PathBuf {
    // Test executables live in <target>/<profile>/deps/.
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("target profile directory")
}

/// The path of example `name` from package `package`, building it if needed.
pub fn example(package: &str, name: &str) -> PathBuf {
    build(
        package,
        "--example",
        name,
        &Path::new("examples").join(name),
    )
}

/// The path of binary `name` from package `package`, building it if needed.
pub fn binary(package: &str, name: &str) -> PathBuf {
    build(package, "--bin", name, Path::new(name))
}

/// Set (to `1`) when every workspace binary and example is built already.
pub const PREBUILT_ENV: &str = "NODEPLUGINS_TEST_PREBUILT";

fn build(package: &str, kind: &str, name: &str, relative: &Path) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let path = target_profile_dir().join(relative);
    if std::env::var_os(PREBUILT_ENV).is_some_and(|v| v == "1") && path.exists() {
        return path;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    // `--workspace`, not `-p package`: features resolve as in the full
    // build that runs before the tests, so an up-to-date target is a no-op
    // instead of a rebuild of every dependency with other features.
    command.args(["build", "--quiet", "--workspace", kind, name]);
    if target_profile_dir()
        .file_name()
        .is_some_and(|p| p == "release")
    {
        command.arg("--release");
    }
    let status = command.status().expect("run cargo build");
    assert!(
        status.success(),
        "cargo build --workspace {kind} {name} (from {package}) failed"
    );
    assert!(path.exists(), "{} was not built", path.display());
    path
}

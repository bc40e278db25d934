//! The guide's examples build as a plugin author's own crate would build
//! them: a new crate outside the workspace whose dependencies are exactly
//! the `Cargo.toml` lines `docs/plugin-authors.md` gives, with the SDK
//! taken from this checkout. A name the examples use that only a crate
//! outside those lines provides (such as `async_trait` or `tonic` at the
//! SDK's versions) fails the build.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The first ```toml block of the plugin author's guide.
fn documented_dependencies() -> String {
    let guide = std::fs::read_to_string(workspace().join("docs/plugin-authors.md")).unwrap();
    let start = guide.find("```toml\n").expect("a toml block in the guide") + "```toml\n".len();
    let end = start + guide[start..].find("```").unwrap();
    guide[start..end].to_string()
}

/// The workspace's profile settings, so that the crate's dependencies are
/// built as the workspace builds them and the build reuses its target
/// directory's work.
fn profiles() -> String {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let start = manifest
        .find("[profile.")
        .expect("profiles in the workspace");
    manifest[start..].to_string()
}

#[test]
fn the_guides_examples_build_as_a_crate_of_their_own_with_the_documented_lines() {
    let dependencies = documented_dependencies();
    assert!(
        dependencies.starts_with("[dependencies]\n"),
        "{dependencies}"
    );
    let dir = tempfile::tempdir().unwrap();
    let sdk = workspace().join("crates/sdk");
    let manifest = format!(
        "[package]\nname = \"my-plugins\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         {dependencies}\n[patch.crates-io]\nnodeplugins-sdk = {{ path = {sdk:?} }}\n\n{}",
        profiles()
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    let bins = dir.path().join("src/bin");
    std::fs::create_dir_all(&bins).unwrap();
    for example in ["minimal_dra_driver.rs", "minimal_device_plugin.rs"] {
        std::fs::copy(sdk.join("examples").join(example), bins.join(example)).unwrap();
    }
    // The workspace's lock file: the same versions, nothing fetched.
    std::fs::copy(
        workspace().join("Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline", "--quiet", "--bins"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the examples do not build as a crate of their own:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! A variable read from a file in one of the pod's volumes (`fileKeyRef`,
//! the kubelet's `EnvFiles`, on by default since 1.35): the file is found
//! at its path within the volume as set up on the host (never outside
//! it, whatever symlinks it holds), read when the container is made (an
//! init container may have written it), and parsed as the kubelet's
//! `ParseEnv` parses it, a strict subset of the shell's syntax:
//!
//! - `NAME='value'`, the value in single quotes, taken as it is (no escape,
//!   no expansion), over several lines if the quotes span them;
//! - blank lines, lines starting with `#` and a `# comment` after the
//!   closing quote are skipped; spaces before the name are too;
//! - a space before `=` is refused; a space after it makes the value
//!   empty (`NAME= 'x'` is `NAME=` to a shell);
//! - anything else is refused with the line it is on.
//!
//! The first definition of the key wins. A key the file lacks, or whose
//! value is empty, leaves the variable out when optional, and otherwise
//! refuses the container with the kubelet's message.

use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::FileKeySelector;

use crate::volumes::PodVolumes;

/// The value of `selector`'s key in its file within the pod's `volumes`:
/// `Ok(None)` when it is optional and has none; an error is the
/// kubelet's message.
pub(crate) fn file_key_value(
    selector: &FileKeySelector,
    volumes: Option<&PodVolumes>,
) -> Result<Option<String>, String> {
    let volume = volumes
        .and_then(|v| v.get(&selector.volume_name))
        .filter(|v| v.image.is_none())
        .ok_or_else(|| {
            format!(
                "cannot find the volume {:?} referenced by FileKeyRef",
                selector.volume_name
            )
        })?;
    let path = within(&volume.host_path, &selector.path);
    let value = match path
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|p| parse_env_file(p, &selector.key))
    {
        Ok(value) => value,
        Err(error) => {
            tracing::error!(
                volume = %selector.volume_name,
                path = %selector.path,
                %error,
                "cannot read the environment variable file"
            );
            return Err("couldn't parse env file".into());
        }
    };
    match value {
        Some(value) if !value.is_empty() => Ok(Some(value)),
        _ if selector.optional == Some(true) => Ok(None),
        _ => Err(format!(
            "environment variable key {:?} not found in file {:?}",
            selector.key,
            volume.host_path.join(&selector.path).display().to_string()
        )),
    }
}

/// `relative` under `root`, symlinks resolved, refused when it leads out
/// of `root`.
fn within(root: &Path, relative: &str) -> Result<PathBuf, String> {
    let relative = Path::new(relative);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "path {} is not within its volume",
            relative.display()
        ));
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("volume {}: {e}", root.display()))?;
    let path = root
        .join(relative)
        .canonicalize()
        .map_err(|e| format!("failed to open environment variable file {relative:?}: {e}"))?;
    if !path.starts_with(&root) {
        return Err(format!(
            "path {} leads out of its volume",
            relative.display()
        ));
    }
    Ok(path)
}

/// The value of `key` in the environment file at `path` (`None`: it is
/// not there), as the kubelet's `ParseEnv` reads it.
fn parse_env_file(path: &Path, key: &str) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("failed to open environment variable file {path:?}: {e}"))?;
    parse_env(&text, key)
}

/// The value of `key` in environment file `text`.
fn parse_env(text: &str, key: &str) -> Result<Option<String>, String> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let invalid = |n: usize, why: &str| {
        Err(format!(
            "invalid environment variable format at line {n}: {why}"
        ))
    };
    while let Some((n, line)) = lines.next() {
        let line = line.trim_start_matches([' ', '\t']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name_part, value_part)) = line.split_once('=') else {
            return invalid(n, "missing '='");
        };
        let name = name_part.trim_end_matches([' ', '\t']);
        if name.is_empty() {
            return invalid(n, "empty variable name");
        }
        if name != name_part {
            return invalid(n, "whitespace before '=' is not allowed");
        }
        let trimmed = value_part.trim_start_matches([' ', '\t']);
        if trimmed != value_part {
            // `NAME= 'x'` assigns nothing, as a shell does.
            if name == key {
                return Ok(Some(String::new()));
            }
            continue;
        }
        let Some(mut rest) = trimmed.strip_prefix('\'') else {
            return invalid(n, "value must be enclosed in single quotes");
        };
        let started = n;
        let mut at = n;
        let mut value = String::new();
        loop {
            if let Some(close) = rest.find('\'') {
                value.push_str(&rest[..close]);
                let after = rest[close + 1..].trim_start_matches([' ', '\t']);
                if !after.is_empty() && !after.starts_with('#') {
                    return invalid(at, "unexpected content after closing quote");
                }
                if name == key {
                    return Ok(Some(value));
                }
                break;
            }
            value.push_str(rest);
            value.push('\n');
            match lines.next() {
                Some((next, line)) => {
                    at = next;
                    rest = line;
                }
                None => {
                    return Err(format!(
                        "invalid environment variable format starting at line {started}: unclosed single quote"
                    ));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::volumes::PodVolume;

    #[test]
    fn values_are_read_as_the_kubelets_parser_reads_them() {
        let text = "# settings\n\n  A='one'\nB='two' # note\nC='multi\nline'\nD= 'gone'\nE=''\n";
        assert_eq!(parse_env(text, "A").unwrap().as_deref(), Some("one"));
        assert_eq!(parse_env(text, "B").unwrap().as_deref(), Some("two"));
        assert_eq!(
            parse_env(text, "C").unwrap().as_deref(),
            Some("multi\nline")
        );
        assert_eq!(parse_env(text, "D").unwrap().as_deref(), Some(""));
        assert_eq!(parse_env(text, "E").unwrap().as_deref(), Some(""));
        assert_eq!(parse_env(text, "F").unwrap(), None);
        // The first definition wins; the parse stops there.
        assert_eq!(
            parse_env("A='1'\nA='2'\nbroken", "A").unwrap().as_deref(),
            Some("1")
        );
        for (text, message) in [
            (
                "A",
                "invalid environment variable format at line 1: missing '='",
            ),
            (
                "x='1'\n='2'",
                "invalid environment variable format at line 2: empty variable name",
            ),
            (
                "A ='1'",
                "invalid environment variable format at line 1: whitespace before '=' is not allowed",
            ),
            (
                "A=1",
                "invalid environment variable format at line 1: value must be enclosed in single quotes",
            ),
            (
                "A='1' x",
                "invalid environment variable format at line 1: unexpected content after closing quote",
            ),
            (
                "\nA='1\n2",
                "invalid environment variable format starting at line 2: unclosed single quote",
            ),
        ] {
            assert_eq!(parse_env(text, "Z").unwrap_err(), message, "{text:?}");
        }
    }

    #[test]
    fn a_file_key_is_read_within_its_volume_or_refused_in_the_kubelets_words() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("vol");
        std::fs::create_dir(&volume).unwrap();
        std::fs::write(volume.join("env"), "TOKEN='s3cret'\n").unwrap();
        std::fs::write(dir.path().join("outside"), "TOKEN='no'\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), volume.join("link")).unwrap();
        let volumes: PodVolumes = [(
            "config".to_string(),
            PodVolume {
                host_path: volume.clone(),
                read_only: false,
                managed: true,
                name_on_disk: "config".into(),
                image: None,
            },
        )]
        .into();
        let selector = |path: &str, key: &str, optional: bool| FileKeySelector {
            volume_name: "config".into(),
            path: path.into(),
            key: key.into(),
            optional: Some(optional),
        };
        assert_eq!(
            file_key_value(&selector("env", "TOKEN", false), Some(&volumes)).unwrap(),
            Some("s3cret".into())
        );
        assert_eq!(
            file_key_value(&selector("env", "OTHER", true), Some(&volumes)).unwrap(),
            None
        );
        let missing = file_key_value(&selector("env", "OTHER", false), Some(&volumes)).unwrap_err();
        assert!(
            missing.starts_with("environment variable key \"OTHER\" not found in file \""),
            "{missing}"
        );
        for path in ["link", "absent", "../outside"] {
            assert_eq!(
                file_key_value(&selector(path, "TOKEN", true), Some(&volumes)).unwrap_err(),
                "couldn't parse env file",
                "{path}"
            );
        }
        let mut other = selector("env", "TOKEN", false);
        other.volume_name = "nope".into();
        assert_eq!(
            file_key_value(&other, Some(&volumes)).unwrap_err(),
            "cannot find the volume \"nope\" referenced by FileKeyRef"
        );
    }
}

//! The kubelet's on-disk layout of a pod's volumes, under its pods
//! directory (`<root>/pods`), so that a node can move between the kubelet
//! and this agent and what is set up is found again from disk:
//!
//! - `<uid>/`, `<uid>/volumes/`, `<uid>/plugins/`: made 0750 before any
//!   volume (`makePodDataDirs`);
//! - `<uid>/volumes/<plugin>/<name>`: a volume, its plugin's name escaped
//!   (`kubernetes.io/configmap` is `kubernetes.io~configmap`);
//! - `<uid>/plugins/kubernetes.io~empty-dir/<name>/ready`: an emptyDir set
//!   up (a wrapped one, behind a secret, configMap, downwardAPI or projected
//!   volume, is named `wrapped_<name>`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The emptyDir plugin.
pub(crate) const EMPTY_DIR: &str = "kubernetes.io/empty-dir";
/// The hostPath plugin.
pub(crate) const HOST_PATH: &str = "kubernetes.io/host-path";
/// The configMap plugin.
pub(crate) const CONFIG_MAP: &str = "kubernetes.io/configmap";
/// The secret plugin.
pub(crate) const SECRET: &str = "kubernetes.io/secret";
/// The downwardAPI plugin.
pub(crate) const DOWNWARD_API: &str = "kubernetes.io/downward-api";
/// The projected plugin.
pub(crate) const PROJECTED: &str = "kubernetes.io/projected";
/// The image plugin's name (it keeps nothing on disk).
pub(crate) const IMAGE: &str = "kubernetes.io/image";

/// The mode of the pod's directories.
const POD_DIR_MODE: u32 = 0o750;

/// `name` as a single path element: every `/` made `~`
/// (`utilstrings.EscapeQualifiedName`).
pub(crate) fn escape(name: &str) -> String {
    name.replace('/', "~")
}

/// `name` back from a path element (`UnescapeQualifiedName`).
pub(crate) fn unescape(name: &str) -> String {
    name.replace('~', "/")
}

/// One pod's directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodDirs {
    pod: PathBuf,
}

impl PodDirs {
    /// Pod `uid`'s directories under `pods_dir`.
    pub(crate) fn new(pods_dir: &Path, uid: &str) -> Self {
        Self {
            pod: pods_dir.join(uid),
        }
    }

    /// `<uid>`.
    pub(crate) fn pod_dir(&self) -> &Path {
        &self.pod
    }

    /// `<uid>/volumes`.
    pub(crate) fn volumes(&self) -> PathBuf {
        self.pod.join("volumes")
    }

    /// `<uid>/plugins`.
    pub(crate) fn plugins(&self) -> PathBuf {
        self.pod.join("plugins")
    }

    /// Where volume `name` of plugin `plugin` is set up.
    pub(crate) fn volume(&self, plugin: &str, name: &str) -> PathBuf {
        self.volumes().join(escape(plugin)).join(name)
    }

    /// The emptyDir `name`'s ready file.
    pub(crate) fn empty_dir_ready(&self, name: &str) -> PathBuf {
        self.plugins()
            .join(escape(EMPTY_DIR))
            .join(name)
            .join("ready")
    }

    /// Makes the pod's directory, `volumes` and `plugins` (0750), as the
    /// kubelet does before any volume.
    pub(crate) fn make(&self) -> std::io::Result<()> {
        for dir in [self.pod.clone(), self.volumes(), self.plugins()] {
            if !dir.is_dir() {
                std::fs::create_dir_all(&dir)?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(POD_DIR_MODE))?;
            }
        }
        Ok(())
    }

    /// The volumes set up on disk: (plugin, name) for every
    /// `volumes/<plugin>/<name>` directory.
    pub(crate) fn volumes_on_disk(&self) -> std::io::Result<Vec<(String, String)>> {
        let mut found = Vec::new();
        let plugins = match std::fs::read_dir(self.volumes()) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        for plugin in plugins {
            let plugin = plugin?;
            if !plugin.file_type()?.is_dir() {
                continue;
            }
            let plugin_name = unescape(&plugin.file_name().to_string_lossy());
            for volume in std::fs::read_dir(plugin.path())? {
                let volume = volume?;
                found.push((
                    plugin_name.clone(),
                    volume.file_name().to_string_lossy().into_owned(),
                ));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Removes what is left of the pod's volumes once each is torn down:
    /// the empty directories under `volumes` (never anything with content:
    /// a volume still there keeps the pod's directory, as the kubelet's
    /// `removeOrphanedPodVolumeDirs` only removes empty ones), and
    /// `plugins`.
    pub(crate) fn remove_volume_dirs(&self) -> std::io::Result<()> {
        remove_empty_tree(&self.volumes())?;
        match std::fs::remove_dir_all(self.plugins()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Removes `dir` and the directories under it, all of which must be empty
/// of anything else; a missing `dir` is removed already.
fn remove_empty_tree(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_empty_tree(&entry.path())?;
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::DirectoryNotEmpty,
                format!("{} is left in a volume", entry.path().display()),
            ));
        }
    }
    std::fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_pods_volumes_sit_where_the_kubelet_puts_them() {
        let dirs = PodDirs::new(Path::new("/var/lib/kubelet/pods"), "u1");
        assert_eq!(
            dirs.volume(PROJECTED, "kube-api-access-abcde"),
            Path::new(
                "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access-abcde"
            )
        );
        assert_eq!(
            dirs.empty_dir_ready("scratch"),
            Path::new("/var/lib/kubelet/pods/u1/plugins/kubernetes.io~empty-dir/scratch/ready")
        );
    }

    #[test]
    fn volumes_on_disk_are_found_and_only_empty_ones_removed() {
        let root = tempfile::tempdir().unwrap();
        let dirs = PodDirs::new(root.path(), "u1");
        dirs.make().unwrap();
        let mode = std::fs::metadata(dirs.volumes())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);
        std::fs::create_dir_all(dirs.volume(CONFIG_MAP, "cfg")).unwrap();
        std::fs::create_dir_all(dirs.volume(EMPTY_DIR, "scratch")).unwrap();
        assert_eq!(
            dirs.volumes_on_disk().unwrap(),
            [
                (CONFIG_MAP.to_string(), "cfg".to_string()),
                (EMPTY_DIR.to_string(), "scratch".to_string())
            ]
        );
        std::fs::write(dirs.volume(EMPTY_DIR, "scratch").join("data"), b"x").unwrap();
        assert!(
            dirs.remove_volume_dirs().is_err(),
            "content is never removed"
        );
        assert!(dirs.volume(EMPTY_DIR, "scratch").join("data").exists());
        std::fs::remove_file(dirs.volume(EMPTY_DIR, "scratch").join("data")).unwrap();
        dirs.remove_volume_dirs().unwrap();
        assert!(!dirs.volumes().exists());
        dirs.remove_volume_dirs().unwrap();
    }
}

//! The files the kubelet makes for a pod's containers under its pods
//! directory (`<root>/pods/<uid>/`), and mounts into them after the
//! device plugins' mounts:
//!
//! - `etc-hosts`, the node's `/etc/hosts` under the kubelet's header for a
//!   pod in the host's network (`# Kubernetes-managed hosts file (host
//!   network).`), mode 0644, mounted at `/etc/hosts`;
//! - `containers/<name>/<8 hex digits>`, an empty file per container made
//!   (mode 0666), mounted at its `terminationMessagePath`
//!   (`/dev/termination-log` by default).
//!
//! The directory goes with the pod, once its containers are stopped.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::runtime::MountSpec;

/// The node's hosts file.
pub(crate) const ETC_HOSTS: &str = "/etc/hosts";
/// The kubelet's header of a host-network pod's hosts file.
const HOSTS_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";
/// Where a container's termination message goes by default.
const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// One pod's directory of files.
pub(crate) struct PodFiles {
    dir: PathBuf,
}

impl PodFiles {
    /// Pod `uid`'s files under `pods_dir`.
    pub(crate) fn new(pods_dir: &Path, uid: &str) -> Self {
        Self {
            dir: pods_dir.join(uid),
        }
    }

    /// The mounts of container `name` after its device plugins' (made
    /// now): the pod's hosts file, and a fresh termination log at
    /// `termination_path` (`None`: the default).
    pub(crate) fn mounts(
        &self,
        name: &str,
        termination_path: Option<&str>,
    ) -> std::io::Result<Vec<MountSpec>> {
        let hosts = self.hosts_file()?;
        let log = self.termination_log(name)?;
        Ok(vec![
            MountSpec {
                container_path: ETC_HOSTS.into(),
                host_path: hosts.display().to_string(),
                read_only: false,
                propagation: crate::runtime::MountPropagation::Private,
                selinux_relabel: false,
                recursive_read_only: false,
                image: None,
            },
            MountSpec {
                container_path: termination_path
                    .filter(|p| !p.is_empty())
                    .unwrap_or(TERMINATION_MESSAGE_PATH)
                    .into(),
                host_path: log.display().to_string(),
                read_only: false,
                propagation: crate::runtime::MountPropagation::Private,
                selinux_relabel: false,
                recursive_read_only: false,
                image: None,
            },
        ])
    }

    /// The pod's hosts file, made once.
    fn hosts_file(&self) -> std::io::Result<PathBuf> {
        let path = self.dir.join("etc-hosts");
        if !path.exists() {
            std::fs::create_dir_all(&self.dir)?;
            let node = std::fs::read_to_string(ETC_HOSTS).unwrap_or_default();
            std::fs::write(&path, format!("{HOSTS_HEADER}{node}"))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
        }
        Ok(path)
    }

    /// A fresh, empty termination log of container `name`.
    fn termination_log(&self, name: &str) -> std::io::Result<PathBuf> {
        let dir = self.dir.join("containers").join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))?;
        let path = dir.join(format!("{:08x}", random_u32()));
        std::fs::write(&path, b"")?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        Ok(path)
    }

    /// Removes the pod's files.
    pub(crate) fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A random number (the kubelet names a termination log with one): the
/// standard library's per-process random hash keys over the time.
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    hasher.finish() as u32
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_container_gets_the_pods_hosts_file_and_a_termination_log_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let files = PodFiles::new(dir.path(), "u1");
        let first = files.mounts("main", None).unwrap();
        let again = files.mounts("main", Some("/tmp/msg")).unwrap();
        assert_eq!(first[0].container_path, "/etc/hosts");
        assert_eq!(
            first[0].host_path, again[0].host_path,
            "one hosts file per pod"
        );
        let hosts = std::fs::read_to_string(&first[0].host_path).unwrap();
        assert!(hosts.starts_with(HOSTS_HEADER), "{hosts}");
        assert_eq!(first[1].container_path, "/dev/termination-log");
        assert_eq!(again[1].container_path, "/tmp/msg");
        assert_ne!(
            first[1].host_path, again[1].host_path,
            "a fresh log per container made"
        );
        let mode = std::fs::metadata(&first[1].host_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o666);
        files.remove().unwrap();
        assert!(!dir.path().join("u1").exists());
        files.remove().unwrap();
    }
}

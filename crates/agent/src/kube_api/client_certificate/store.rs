//! The node's client certificates on disk, as the kubelet keeps them
//! (client-go's certificate file store, prefix `kubelet-client`): each
//! certificate with its key in one file `kubelet-client-<time>.pem` (time
//! as `2006-01-02-15-04-05`), mode 0600, written and synced before the
//! symlink `kubelet-client-current.pem` is pointed at it: a new symlink
//! `kubelet-client-updated.pem` is made and renamed over the current one.
//! A rotation interrupted between the two (no current, an updated
//! symlink) is finished on the next look, as client-go's `recover`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::common::pem::{pem, pem_blocks};
use crate::kube_api::client_certificate::certificate::{Certificate, certificates};
use crate::kube_api::client_certificate::error::ClientCertificateError;

/// The files' prefix.
const PREFIX: &str = "kubelet-client";

/// The certificate in use and its key.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    /// The leaf.
    pub(crate) leaf: Certificate,
    /// The whole file (certificates, then the key).
    pub(crate) pem: Vec<u8>,
}

/// The store in one directory.
#[derive(Debug, Clone)]
pub(crate) struct CertificateStore {
    dir: PathBuf,
}

impl CertificateStore {
    /// The store in `dir` (the kubelet's `--cert-dir`).
    pub(crate) fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// `kubelet-client-current.pem`: what a kubeconfig names.
    pub(crate) fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{PREFIX}-current.pem"))
    }

    fn updated_path(&self) -> PathBuf {
        self.dir.join(format!("{PREFIX}-updated.pem"))
    }

    /// The certificate in use, `None` when there is none yet. An error
    /// when the file is there and holds no certificate or no key.
    pub(crate) fn current(&self) -> Result<Option<Stored>, ClientCertificateError> {
        self.recover()?;
        let path = self.current_path();
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ClientCertificateError::File { path, source }),
        };
        let invalid = |reason: String| ClientCertificateError::Invalid {
            what: path.display().to_string(),
            reason,
        };
        let text = String::from_utf8_lossy(&bytes);
        let leaf = certificates(&text).map_err(invalid)?.remove(0);
        if !text.contains("PRIVATE KEY-----") {
            return Err(invalid("no private key".into()));
        }
        Ok(Some(Stored { leaf, pem: bytes }))
    }

    /// Stores `cert_pem` (the leaf first) with `key_pem` (one PEM block) in
    /// a new file and makes it the current one.
    pub(crate) fn update(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<Stored, ClientCertificateError> {
        let file_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClientCertificateError::File { path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(file_error(&self.dir))?;
        let cert_text = String::from_utf8_lossy(cert_pem);
        let leaf = certificates(&cert_text)
            .map_err(|reason| ClientCertificateError::Invalid {
                what: "the issued certificate".into(),
                reason,
            })?
            .remove(0);
        let key_text = String::from_utf8_lossy(key_pem);
        let Some(label) = key_text
            .lines()
            .find_map(|l| l.strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
        else {
            return Err(ClientCertificateError::Invalid {
                what: "the key".into(),
                reason: "no PEM block".into(),
            });
        };
        let mut contents = Vec::new();
        for der in pem_blocks(&cert_text) {
            if x509_parser::parse_x509_certificate(&der).is_ok() {
                contents.extend(pem("CERTIFICATE", &der));
            }
        }
        for der in pem_blocks(&key_text).into_iter().take(1) {
            contents.extend(pem(label, &der));
        }
        let stamp = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d-%H-%M-%S");
        let path = self.dir.join(format!("{PREFIX}-{stamp}.pem"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(file_error(&path))?;
        file.write_all(&contents).map_err(file_error(&path))?;
        file.sync_all().map_err(file_error(&path))?;
        drop(file);
        self.point_current_at(&path)?;
        Ok(Stored {
            leaf,
            pem: contents,
        })
    }

    /// The current symlink swapped for one to `file` in one rename. A
    /// current or updated file that is not a symlink is left alone, with
    /// an error, as client-go's.
    fn point_current_at(&self, file: &Path) -> Result<(), ClientCertificateError> {
        let current = self.current_path();
        let updated = self.updated_path();
        let error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClientCertificateError::File { path, source }
        };
        for path in [&current, &updated] {
            match std::fs::symlink_metadata(path) {
                Ok(meta) if !meta.file_type().is_symlink() => {
                    return Err(ClientCertificateError::Invalid {
                        what: path.display().to_string(),
                        reason: "expected a symlink, it is a file".into(),
                    });
                }
                Ok(_) | Err(_) => {}
            }
        }
        match std::fs::remove_file(&updated) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ClientCertificateError::File {
                    path: updated,
                    source,
                });
            }
        }
        let target = std::path::absolute(file).map_err(error(file))?;
        std::os::unix::fs::symlink(&target, &updated).map_err(error(&updated))?;
        std::fs::rename(&updated, &current).map_err(error(&current))?;
        Ok(())
    }

    /// A rotation stopped between its two steps finished: no current
    /// file, an updated symlink, renamed to the current one.
    fn recover(&self) -> Result<(), ClientCertificateError> {
        let current = self.current_path();
        if std::fs::symlink_metadata(&current).is_ok() {
            return Ok(());
        }
        let updated = self.updated_path();
        match std::fs::symlink_metadata(&updated) {
            Ok(meta) if meta.file_type().is_symlink() => std::fs::rename(&updated, &current)
                .map_err(|source| ClientCertificateError::File {
                    path: current,
                    source,
                }),
            Ok(_) => Err(ClientCertificateError::Invalid {
                what: updated.display().to_string(),
                reason: "expected a symlink, it is a file".into(),
            }),
            Err(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A certificate and its key made by openssl for `subject`, valid a day.
    fn openssl_pair(dir: &Path, name: &str, subject: &str) -> (Vec<u8>, Vec<u8>) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        let status = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", subject, "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run openssl");
        assert!(status.success());
        (std::fs::read(cert).unwrap(), std::fs::read(key).unwrap())
    }

    #[test]
    fn each_certificate_gets_a_file_and_the_symlink_follows_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertificateStore::new(&dir.path().join("pki"));
        assert!(store.current().unwrap().is_none(), "nothing stored yet");
        let (cert, key) = openssl_pair(dir.path(), "a", "/O=system:nodes/CN=system:node:n1");
        let stored = store.update(&cert, &key).unwrap();
        assert!(stored.leaf.is_for("n1"));
        assert!(!stored.leaf.is_for("n2"));
        let current = store.current_path();
        assert!(
            std::fs::symlink_metadata(&current)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let first = std::fs::read_link(&current).unwrap();
        assert!(first.is_absolute(), "{first:?}");
        let name = first.file_name().unwrap().to_str().unwrap().to_string();
        // kubelet-client-2006-01-02-15-04-05.pem
        assert_eq!(
            name.len(),
            "kubelet-client-2006-01-02-15-04-05.pem".len(),
            "{name}"
        );
        assert!(name.starts_with("kubelet-client-20") && name.ends_with(".pem"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&first).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = std::fs::read_to_string(&current).unwrap();
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----\n"), "{text}");
        assert!(text.contains("-----BEGIN PRIVATE KEY-----\n"), "{text}");
        let read = store.current().unwrap().unwrap();
        assert_eq!(read.leaf, stored.leaf);

        // The next one, in a file of its own (or the same one, within
        // the same second), made the current one.
        let (cert, key) = openssl_pair(dir.path(), "b", "/O=system:nodes/CN=system:node:n2");
        let newer = store.update(&cert, &key).unwrap();
        assert!(newer.leaf.is_for("n2"));
        assert!(store.current().unwrap().unwrap().leaf.is_for("n2"));
    }

    #[test]
    fn a_rotation_stopped_between_its_steps_is_finished_on_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let store = CertificateStore::new(&pki);
        let (cert, key) = openssl_pair(dir.path(), "a", "/O=system:nodes/CN=system:node:n1");
        store.update(&cert, &key).unwrap();
        // Stopped after the updated symlink was made and the current one
        // removed.
        let target = std::fs::read_link(store.current_path()).unwrap();
        std::fs::remove_file(store.current_path()).unwrap();
        std::os::unix::fs::symlink(&target, pki.join("kubelet-client-updated.pem")).unwrap();
        let found = store.current().unwrap().expect("recovered");
        assert!(found.leaf.is_for("n1"));
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), target);
        assert!(!pki.join("kubelet-client-updated.pem").exists());
    }

    #[test]
    fn a_current_file_that_is_no_symlink_is_left_alone_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let (cert, key) = openssl_pair(dir.path(), "a", "/O=system:nodes/CN=system:node:n1");
        let both = [cert.clone(), key.clone()].concat();
        std::fs::write(pki.join("kubelet-client-current.pem"), &both).unwrap();
        let store = CertificateStore::new(&pki);
        assert!(store.current().unwrap().unwrap().leaf.is_for("n1"));
        let error = store.update(&cert, &key).unwrap_err();
        assert!(error.to_string().contains("expected a symlink"), "{error}");
        assert_eq!(
            std::fs::read(pki.join("kubelet-client-current.pem")).unwrap(),
            both
        );
        // And a file without a key is no certificate to use.
        std::fs::write(pki.join("kubelet-client-current.pem"), &cert).unwrap();
        let error = store.current().unwrap_err();
        assert!(error.to_string().contains("no private key"), "{error}");
    }
}

//! Client certificate rotation as the kubelet's certificate manager does
//! it: the next request at a jittered 70-90 % of the current
//! certificate's life (at once when there is none, or it is not the
//! node's: another common name, `system:nodes` missing), made with the
//! current client (so with the current certificate, which the API
//! server's approver takes for a renewal), waited for up to 15 minutes,
//! and stored. A failed try is tried again after 2, 4, 8, 16 and 32 s
//! (jittered a tenth), then every 32 s. The store's symlink swap is what
//! the credentials watch sees: the client is built again on the new
//! certificate and the old one's connections close with it.
//!
//! Only a kubeconfig that names the store's `kubelet-client-current.pem`
//! is rotated: one with its own certificate (embedded, or another file)
//! is used as it is, said once at start.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kube_api::Connection;
use crate::kube_api::client_certificate::bootstrap::current_user;
use crate::kube_api::client_certificate::error::ClientCertificateError;
use crate::kube_api::client_certificate::signing_request::{
    NodeRequest, request_certificate, wait_for_certificate,
};
use crate::kube_api::client_certificate::store::CertificateStore;

/// How long a rotation's request is waited for.
const ROTATION_WAIT: Duration = Duration::from_secs(15 * 60);
/// The tries after a failure: 2 s doubling, five of them, then every 32 s.
const FIRST_RETRY: Duration = Duration::from_secs(2);
const RETRY_STEPS: u32 = 5;
const LAST_RETRY: Duration = Duration::from_secs(32);

/// Keeps the node's client certificate current.
pub(crate) struct Rotation {
    store: CertificateStore,
    node: String,
}

impl Rotation {
    /// The rotation of the certificates in `cert_dir` for `node`, when
    /// `kubeconfig` names the store's current file; else `None`, said.
    pub(crate) fn for_kubeconfig(kubeconfig: &Path, cert_dir: &Path, node: &str) -> Option<Self> {
        let store = CertificateStore::new(cert_dir);
        let current = store.current_path();
        let named = kube::config::Kubeconfig::read_from(kubeconfig)
            .ok()
            .and_then(|config| {
                let user = current_user(&config)?;
                Some((user.client_certificate.clone(), user.client_key.clone()))
            });
        let names_store = |file: &Option<String>| {
            file.as_ref()
                .is_some_and(|f| same_file(Path::new(f), &current))
        };
        match named {
            Some((cert, key)) if names_store(&cert) && names_store(&key) => Some(Self {
                store,
                node: node.to_string(),
            }),
            _ => {
                tracing::warn!(
                    kubeconfig = %kubeconfig.display(),
                    expected = %current.display(),
                    "client certificate rotation is on, but the kubeconfig's client certificate and key are not the certificate directory's current one: the kubeconfig's are used as they are, never rotated"
                );
                None
            }
        }
    }

    /// Rotates until `shutdown`, with the client `connection` gives.
    pub(crate) async fn run(
        self,
        connection: watch::Receiver<Connection>,
        shutdown: CancellationToken,
    ) {
        tracing::info!(dir = %self.store.current_path().display(), "client certificate rotation is on");
        loop {
            let deadline = self.next_deadline();
            if let Ok(wait) = deadline.duration_since(SystemTime::now()) {
                tracing::info!(sleep = ?wait, "waiting for the next client certificate rotation");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
            let mut retry = FIRST_RETRY;
            let mut tries = 0;
            loop {
                let client = connection.borrow().client.clone();
                let rotated = tokio::select! {
                    () = shutdown.cancelled() => return,
                    rotated = self.rotate(&client) => rotated,
                };
                match rotated {
                    Ok(name) => {
                        tracing::info!(csr = %name, "client certificate rotated");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "client certificate rotation failed");
                        tries += 1;
                        let pause = if tries > RETRY_STEPS {
                            LAST_RETRY
                        } else {
                            retry
                        };
                        retry = (retry * 2).min(LAST_RETRY);
                        let pause = pause.mul_f64(1.0 + 0.1 * rand::random::<f64>());
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
            }
            // As the kubelet's loop: a second between rotations.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// When the current certificate is to be rotated: now when there is
    /// none, it cannot be read, or it is not the node's.
    fn next_deadline(&self) -> SystemTime {
        let now = SystemTime::now();
        let current = match self.store.current() {
            Ok(Some(current)) => current,
            Ok(None) => return now,
            Err(e) => {
                tracing::warn!(error = %e, "the current client certificate cannot be read: rotating now");
                return now;
            }
        };
        let leaf = current.leaf;
        if !leaf.is_for(&self.node) {
            tracing::info!(
                common_name = %leaf.common_name,
                node = %self.node,
                "the current client certificate is not the node's: rotating now"
            );
            return now;
        }
        let total = leaf
            .not_after
            .duration_since(leaf.not_before)
            .unwrap_or_default();
        leaf.not_before + total.mul_f64(0.7 + 0.2 * rand::random::<f64>())
    }

    /// One rotation: a new key, a request, its certificate stored.
    async fn rotate(&self, client: &kube::Client) -> Result<String, ClientCertificateError> {
        let made = NodeRequest::make(&self.node, None).await?;
        let asked = made.asked();
        let (name, uid) = request_certificate(client, &asked, None).await?;
        let cert = wait_for_certificate(client, &name, &uid, ROTATION_WAIT).await?;
        self.store.update(&cert, &made.key.key_pem)?;
        Ok(name)
    }
}

/// Whether `a` and `b` are the same path, once made absolute (`b` may
/// not exist yet).
fn same_file(a: &Path, b: &Path) -> bool {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p));
    absolute(a) == absolute(b)
}

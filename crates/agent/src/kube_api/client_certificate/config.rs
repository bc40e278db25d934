//! How the node's client certificate is had and kept.

use std::path::PathBuf;

/// The node's client certificate, had and kept as the kubelet has and
/// keeps its own: with a bootstrap kubeconfig, asked for through a
/// CertificateSigningRequest when the kubeconfig is missing or its
/// certificate expired (TLS bootstrap); with rotation, asked for again at
/// 70-90 % of its life. The certificates are kept in `cert_dir` as the
/// kubelet keeps them (`kubelet-client-<time>.pem`, the symlink
/// `kubelet-client-current.pem`), so a node moves between the kubelet and
/// the agent with them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientCertificates {
    /// Where the certificates are kept (the kubelet's `--cert-dir`).
    pub cert_dir: PathBuf,
    /// The credentials that may ask for the node's first certificate (the
    /// kubelet's `--bootstrap-kubeconfig`); the kubeconfig is then written
    /// by the agent, naming the certificate in `cert_dir`. `None`: the
    /// kubeconfig is used as it is.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Whether the certificate is asked for again before it expires (the
    /// kubelet's `rotateCertificates`). It is when the kubeconfig names
    /// `kubelet-client-current.pem` in `cert_dir`, as a kubeconfig written
    /// by a bootstrap does.
    pub rotate: bool,
}

impl ClientCertificates {
    /// Certificates kept in `cert_dir`, no bootstrap, no rotation.
    pub fn new(cert_dir: impl Into<PathBuf>) -> Self {
        Self {
            cert_dir: cert_dir.into(),
            bootstrap_kubeconfig: None,
            rotate: false,
        }
    }
}

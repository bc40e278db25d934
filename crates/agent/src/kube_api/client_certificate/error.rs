//! Why the node's client certificate could not be had.

use std::path::PathBuf;

/// Why the node's client certificate could not be had or stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientCertificateError {
    /// A file could not be read or written.
    #[error("{path:?}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A kubeconfig could not be read or used.
    #[error("{path:?}: {reason}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate or key is not one.
    #[error("{what}: {reason}")]
    Invalid {
        /// Which one.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The CertificateSigningRequest could not be made or read.
    #[error("certificate signing request {name}: {reason}")]
    Request {
        /// Its name, or what it was to be made with.
        name: String,
        /// The API server's answer.
        reason: String,
    },
    /// The request was refused, failed, deleted, or not answered in time
    /// (the kubelet's words).
    #[error("{0}")]
    NotIssued(String),
}

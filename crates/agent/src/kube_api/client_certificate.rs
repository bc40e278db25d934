//! The node's client certificate, had and kept as the kubelet has and
//! keeps its own (`pkg/kubelet/certificate/bootstrap`, client-go's
//! certificate manager and file store).
//!
//! | file | what |
//! |---|---|
//! | `config` | what is asked for: the certificate directory, a bootstrap kubeconfig, rotation |
//! | `bootstrap` | TLS bootstrap at start: the certificate asked for with the bootstrap credentials, the kubeconfig written |
//! | `rotation` | a new certificate at 70-90 % of the current one's life |
//! | `signing_request` | the CertificateSigningRequest made (or found again) and waited for |
//! | `store` | `kubelet-client-<time>.pem` and the `kubelet-client-current.pem` symlink |
//! | `certificate` | what a certificate says: its life and subject |
//! | `error` | why a certificate could not be had |

pub(crate) mod bootstrap;
mod certificate;
pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod rotation;
mod signing_request;
mod store;

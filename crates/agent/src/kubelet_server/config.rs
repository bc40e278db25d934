//! Where and how the kubelet's API is served: the kubelet's `address`,
//! `port`, `tlsCertFile`/`tlsPrivateKeyFile`, `authentication` and
//! `authorization` settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServingCertificate {
    /// The kubelet's `tlsCertFile` and `tlsPrivateKeyFile`: PEM, the leaf
    /// first.
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
    /// Neither given: `kubelet.crt` and `kubelet.key` in this directory
    /// (the kubelet's `--cert-dir`, `/var/lib/kubelet/pki`), made
    /// self-signed the first time they cannot be read, as the kubelet
    /// makes them.
    SelfSigned {
        /// The directory.
        cert_dir: PathBuf,
        /// The host name the certificate names.
        host: String,
    },
}

/// How a request is authorized (the kubelet's `authorization.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Each request's attributes in a SubjectAccessReview (the default).
    Webhook,
    /// Every authenticated request is allowed.
    AlwaysAllow,
}

/// The kubelet's API settings, with the kubelet's defaults from
/// [`new`](Self::new).
#[derive(Debug, Clone)]
pub struct KubeletServerConfig {
    /// The address and port (`0.0.0.0:10250`).
    pub addr: SocketAddr,
    /// The serving certificate.
    pub certificate: ServingCertificate,
    /// The CA client certificates must chain to
    /// (`authentication.x509.clientCAFile`); `None`: client certificates
    /// are not asked for.
    pub client_ca_file: Option<PathBuf>,
    /// Whether bearer tokens are checked through TokenReviews
    /// (`authentication.webhook.enabled`, default on).
    pub token_webhook: bool,
    /// How long a TokenReview's answer is kept (`2m`).
    pub token_cache_ttl: Duration,
    /// Whether a request with no credentials is `system:anonymous`
    /// (`authentication.anonymous.enabled`, default off: 401).
    pub anonymous: bool,
    /// How requests are authorized.
    pub authorization: AuthorizationMode,
    /// How long an allowed SubjectAccessReview is kept (`5m`).
    pub authorized_ttl: Duration,
    /// How long a denied one is kept (`30s`).
    pub unauthorized_ttl: Duration,
    /// Whether exec, attach, port-forward, run and container logs are
    /// served (`enableDebuggingHandlers`, default on); off, they answer
    /// 405.
    pub debugging_handlers: bool,
    /// The kubelet's read-only port (`readOnlyPort` on `address`): plain
    /// HTTP with neither authentication nor authorization, the health
    /// checks, `/pods` and the metrics, never the debugging handlers;
    /// `None` (the default, the kubelet's `readOnlyPort: 0`) serves none.
    pub read_only_addr: Option<SocketAddr>,
}

impl KubeletServerConfig {
    /// The kubelet's defaults on `addr`, with a self-signed certificate
    /// for `host` kept in `cert_dir`.
    pub fn new(addr: SocketAddr, cert_dir: impl Into<PathBuf>, host: impl Into<String>) -> Self {
        Self {
            addr,
            certificate: ServingCertificate::SelfSigned {
                cert_dir: cert_dir.into(),
                host: host.into(),
            },
            client_ca_file: None,
            token_webhook: true,
            token_cache_ttl: Duration::from_secs(2 * 60),
            anonymous: false,
            authorization: AuthorizationMode::Webhook,
            authorized_ttl: Duration::from_secs(5 * 60),
            unauthorized_ttl: Duration::from_secs(30),
            debugging_handlers: true,
            read_only_addr: None,
        }
    }
}

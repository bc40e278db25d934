//! The TLS configuration of the kubelet's API: the serving certificate,
//! ALPN `http/1.1` (exec, attach and port-forward are HTTP/1.1 upgrades,
//! which the API server's dialer forces), and, with a client CA, a client
//! certificate asked for but not required (Go's `RequestClientCert`): the
//! handshake takes any certificate whose key the client proves it holds,
//! and the authenticator checks its chain, so that a certificate of
//! another CA is a 401 as at the kubelet, not a failed handshake.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};

use super::serving_cert::Serving;

/// Why the TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// No crypto provider is installed in the process.
    #[error(
        "no TLS crypto provider: the application installs one for the process (rustls's CryptoProvider::install_default)"
    )]
    NoProvider,
    /// The client CA file is unusable.
    #[error("client CA file {path}: {message}")]
    ClientCa { path: PathBuf, message: String },
    /// rustls refused the certificate or the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// What checks a presented client certificate's chain.
pub(crate) type ChainCheck = Arc<dyn ClientCertVerifier>;

/// The server's TLS configuration, and the check of client certificates'
/// chains (with a client CA).
pub(crate) fn server_config(
    serving: Serving,
    client_ca: Option<&Path>,
) -> Result<(Arc<ServerConfig>, Option<ChainCheck>), TlsError> {
    let provider = CryptoProvider::get_default()
        .cloned()
        .ok_or(TlsError::NoProvider)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let (builder, chain_check) = match client_ca {
        None => (builder.with_no_client_auth(), None),
        Some(path) => {
            let ca_failed = |message: String| TlsError::ClientCa {
                path: path.to_path_buf(),
                message,
            };
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| ca_failed(e.to_string()))?;
            for cert in certs {
                roots.add(cert).map_err(|e| ca_failed(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(ca_failed("no CERTIFICATE block".to_string()));
            }
            let check =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| ca_failed(e.to_string()))?;
            let request = RequestClientCert {
                hints: check.root_hint_subjects().to_vec(),
                provider,
            };
            (
                builder.with_client_cert_verifier(Arc::new(request)),
                Some(check),
            )
        }
    };
    let mut config = builder.with_single_cert(serving.chain, serving.key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), chain_check))
}

/// Asks for a client certificate and takes any the client holds the key
/// of; its chain is the authenticator's to judge.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

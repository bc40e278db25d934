//! The kubelet's serving certificate: the configured files, or, when none
//! are, `kubelet.crt` and `kubelet.key` in its certificate directory, made
//! once as the kubelet makes them (`certutil.GenerateSelfSignedCertKey`):
//! a CA of its own (`<host>-ca@<unix time>`) and a leaf (`<host>@<unix
//! time>`, the host as its DNS or IP name, server authentication), both
//! RSA 2048 and valid a year from an hour ago; the leaf then the CA in one
//! file, the leaf's key as a PKCS#1 `RSA PRIVATE KEY`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::ServingCertificate;

/// The self-signed certificate's file in the certificate directory.
pub const SELF_SIGNED_CERT_FILE: &str = "kubelet.crt";
/// Its key's file.
pub const SELF_SIGNED_KEY_FILE: &str = "kubelet.key";

/// How long a self-signed certificate is valid.
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// How far back its validity starts (clock skew).
const BACKDATE: Duration = Duration::from_secs(60 * 60);

/// Why the serving certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM.
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    /// The certificate could not be made.
    #[error("while generating a self-signed certificate for {host}: {message}")]
    Generate { host: String, message: String },
}

/// A certificate chain and its key.
pub(crate) struct Serving {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
}

/// The certificate `source` names, made first when it is the self-signed
/// one and cannot be read. Blocking (key generation takes a moment).
pub(crate) fn load(source: &ServingCertificate) -> Result<Serving, CertError> {
    match source {
        ServingCertificate::Files { cert, key } => read(cert, key),
        ServingCertificate::SelfSigned { cert_dir, host } => {
            let cert = cert_dir.join(SELF_SIGNED_CERT_FILE);
            let key = cert_dir.join(SELF_SIGNED_KEY_FILE);
            if let Ok(serving) = read(&cert, &key) {
                return Ok(serving);
            }
            let (cert_pem, key_pem) = generate(host, SystemTime::now())?;
            std::fs::create_dir_all(cert_dir).map_err(file(cert_dir))?;
            write(&cert, cert_pem.as_bytes(), 0o644)?;
            write(&key, key_pem.as_bytes(), 0o600)?;
            tracing::info!(cert = %cert.display(), host, "made a self-signed serving certificate");
            read(&cert, &key)
        }
    }
}

fn read(cert: &Path, key: &Path) -> Result<Serving, CertError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(pem(cert))?;
    if chain.is_empty() {
        return Err(CertError::Pem {
            path: cert.to_path_buf(),
            message: "no CERTIFICATE block".to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(pem(key))?;
    Ok(Serving { chain, key })
}

/// A file written whole or not at all, with `mode`.
fn write(path: &Path, content: &[u8], mode: u32) -> Result<(), CertError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temporary = path.with_extension("tmp");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temporary)
        .and_then(|mut f| f.write_all(content).and_then(|()| f.sync_all()));
    written
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(file(path))
}

fn file(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::File {
        path: path.to_path_buf(),
        source,
    }
}

fn pem(path: &Path) -> impl FnOnce(rustls::pki_types::pem::Error) -> CertError + '_ {
    move |e| CertError::Pem {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// An RSA key rcgen signs with.
struct RsaKey {
    key: rsa::PrivateKey,
    public: Vec<u8>,
}

impl RsaKey {
    fn new() -> Result<Self, String> {
        let key = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).map_err(|e| e.to_string())?;
        let public = key
            .to_public_key()
            .to_pkcs1_der()
            .map_err(|e| e.to_string())?
            .into_vec();
        Ok(Self { key, public })
    }
}

impl rcgen::PublicKeyData for RsaKey {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

impl rcgen::SigningKey for RsaKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        self.key
            .pkcs1v15_sign::<rsa::sha2::Sha256>(msg)
            .map_err(|_| rcgen::Error::RemoteKeyError)
    }
}

/// The self-signed chain (leaf, then CA) and the leaf's key for `host`,
/// made at `now`: PEM.
pub(crate) fn generate(host: &str, now: SystemTime) -> Result<(String, String), CertError> {
    let failed = |message: String| CertError::Generate {
        host: host.to_string(),
        message,
    };
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let not_before = time::OffsetDateTime::from(now - BACKDATE);
    let not_after = time::OffsetDateTime::from(now - BACKDATE + VALIDITY);
    let params = |serial: u64, common_name: String| {
        let mut params = rcgen::CertificateParams::default();
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.not_before = not_before;
        params.not_after = not_after;
        params
    };
    let ca_key = RsaKey::new().map_err(failed)?;
    let mut ca = params(1, format!("{host}-ca@{unix}"));
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| failed(e.to_string()))?;

    let leaf_key = RsaKey::new().map_err(failed)?;
    let mut leaf = params(2, format!("{host}@{unix}"));
    leaf.is_ca = rcgen::IsCa::ExplicitNoCa;
    leaf.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    leaf.subject_alt_names = vec![match host.parse::<IpAddr>() {
        Ok(ip) => rcgen::SanType::IpAddress(ip),
        Err(_) => rcgen::SanType::DnsName(
            host.to_string()
                .try_into()
                .map_err(|e: rcgen::Error| failed(e.to_string()))?,
        ),
    }];
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let leaf_cert = leaf
        .signed_by(&leaf_key, &issuer)
        .map_err(|e| failed(e.to_string()))?;
    let key_pem = leaf_key
        .key
        .to_pkcs1_pem(rsa::pkcs1::LineEnding::LF)
        .map_err(|e| failed(e.to_string()))?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        key_pem.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test with a precise location.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn parse(pem: &str) -> Vec<Vec<u8>> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect()
    }

    #[test]
    fn the_self_signed_chain_is_a_leaf_for_the_host_then_its_own_ca() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (chain, key) = generate("node-a", now).unwrap();
        assert!(key.starts_with("-----BEGIN RSA PRIVATE KEY-----"), "{key}");
        let certs = parse(&chain);
        assert_eq!(certs.len(), 2);
        let (_, leaf) = x509_parser::parse_x509_certificate(&certs[0]).unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(&certs[1]).unwrap();
        assert_eq!(leaf.subject().to_string(), "CN=node-a@1700000000");
        assert_eq!(leaf.issuer().to_string(), "CN=node-a-ca@1700000000");
        assert_eq!(ca.subject().to_string(), "CN=node-a-ca@1700000000");
        assert!(ca.is_ca());
        assert!(!leaf.is_ca());
        let san = leaf.subject_alternative_name().unwrap().unwrap();
        assert_eq!(
            format!("{:?}", san.value.general_names),
            r#"[DNSName("node-a")]"#
        );
        let eku = leaf.extended_key_usage().unwrap().unwrap();
        assert!(eku.value.server_auth && !eku.value.client_auth);
        assert_eq!(leaf.validity().not_before.timestamp(), 1_700_000_000 - 3600);
        assert_eq!(
            leaf.validity().not_after.timestamp() - leaf.validity().not_before.timestamp(),
            365 * 24 * 3600
        );
    }

    #[test]
    fn an_ip_host_is_named_as_an_ip_address() {
        let (chain, _) = generate("10.1.2.3", SystemTime::now()).unwrap();
        let certs = parse(&chain);
        let (_, leaf) = x509_parser::parse_x509_certificate(&certs[0]).unwrap();
        let san = leaf.subject_alternative_name().unwrap().unwrap();
        assert_eq!(
            format!("{:?}", san.value.general_names),
            "[IPAddress([10, 1, 2, 3])]"
        );
    }

    #[test]
    fn the_self_signed_files_are_made_once_and_read_after() {
        let dir = tempfile::tempdir().unwrap();
        let source = ServingCertificate::SelfSigned {
            cert_dir: dir.path().join("pki"),
            host: "node-a".to_string(),
        };
        let first = load(&source).unwrap();
        let second = load(&source).unwrap();
        assert_eq!(first.chain, second.chain);
        let mode = |name: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.path().join("pki").join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(SELF_SIGNED_KEY_FILE), 0o600);
        assert_eq!(mode(SELF_SIGNED_CERT_FILE), 0o644);
    }

    #[test]
    fn a_file_without_a_certificate_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, "nothing").unwrap();
        let source = ServingCertificate::Files {
            cert: cert.clone(),
            key: dir.path().join("k.pem"),
        };
        let error = load(&source).err().unwrap().to_string();
        assert!(error.starts_with(&cert.display().to_string()), "{error}");
    }
}

//! Client certificates for the test API server: a CA it trusts
//! (`--client-ca-file`) and node certificates it signs, valid for as long
//! as a test asks, so that a test can have a certificate expire and be
//! replaced, as the kubelet's own are rotated.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::OffsetDateTime;

/// A CA that signs client certificates.
pub struct ClientCa {
    params: CertificateParams,
    key: KeyPair,
    cert_pem: String,
}

/// A client certificate and its key, in one PEM file as the kubelet keeps
/// them (`kubelet-client-<time>.pem`).
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// The file with the certificate and the key.
    pub path: PathBuf,
    /// When it stops being accepted.
    pub not_after: SystemTime,
}

impl ClientCa {
    /// A new CA.
    pub fn new() -> Self {
        let key = KeyPair::generate().expect("generate the client CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "nodeplugins test client CA");
        params.distinguished_name = name;
        let cert_pem = params.self_signed(&key).expect("sign the client CA").pem();
        Self {
            params,
            key,
            cert_pem,
        }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes the CA certificate to `path`, for `--client-ca-file`.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.cert_pem)
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Writes the CA's key to `path` (PKCS#8 PEM), for a signer.
    pub fn write_key(&self, path: &Path) {
        std::fs::write(path, self.key.serialize_pem())
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// A certificate for `user` in `group` (the node identity:
    /// `system:node:<name>` in `system:nodes`), valid from a minute ago for
    /// `valid_for`, written with its key to `path`.
    pub fn issue(
        &self,
        user: &str,
        group: &str,
        valid_for: Duration,
        path: &Path,
    ) -> ClientCertificate {
        let key = KeyPair::generate().expect("generate a client key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, user);
        name.push(DnType::OrganizationName, group);
        params.distinguished_name = name;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        let valid_for = time::Duration::try_from(valid_for).expect("a validity");
        params.not_after = now + valid_for;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .expect("sign a client certificate");
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        std::fs::write(path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        ClientCertificate {
            path: path.to_path_buf(),
            not_after: SystemTime::from(params.not_after),
        }
    }
}

impl Default for ClientCa {
    fn default() -> Self {
        Self::new()
    }
}

//! What the node's client certificates say: their lifetime and subject.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::pem::pem_blocks;

/// One certificate, the parts read here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Certificate {
    pub(crate) not_before: SystemTime,
    pub(crate) not_after: SystemTime,
    pub(crate) common_name: String,
    pub(crate) organizations: Vec<String>,
}

/// The certificates of the `CERTIFICATE` blocks in `pem_text` (any other
/// block, a key, is passed over), the leaf first. An error when one does
/// not parse, or there is none.
pub(crate) fn certificates(pem_text: &str) -> Result<Vec<Certificate>, String> {
    let mut found = Vec::new();
    for der in pem_blocks(pem_text) {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
            // A key block, or anything but a certificate.
            continue;
        };
        let time = |t: x509_parser::time::ASN1Time| {
            let seconds = t.timestamp();
            match u64::try_from(seconds) {
                Ok(s) => UNIX_EPOCH + Duration::from_secs(s),
                Err(_) => UNIX_EPOCH,
            }
        };
        let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
            a.as_str().map(str::to_string).unwrap_or_default()
        };
        found.push(Certificate {
            not_before: time(cert.validity().not_before),
            not_after: time(cert.validity().not_after),
            common_name: cert
                .subject()
                .iter_common_name()
                .next()
                .map(text)
                .unwrap_or_default(),
            organizations: cert.subject().iter_organization().map(text).collect(),
        });
    }
    if found.is_empty() {
        return Err("no certificate".into());
    }
    Ok(found)
}

impl Certificate {
    /// Whether it is the node's client certificate as the kubelet asks for
    /// it: `CN=system:node:<node>`, `O=system:nodes` among its
    /// organizations (the kubelet's `certSatisfiesTemplate`).
    pub(crate) fn is_for(&self, node: &str) -> bool {
        self.common_name == format!("system:node:{node}")
            && self.organizations.iter().any(|o| o == "system:nodes")
    }
}

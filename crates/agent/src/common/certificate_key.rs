//! Private keys and the PKCS#10 requests signed by them, as the kubelet
//! makes them.
//!
//! For a podCertificate projection, as the kubelet's pod certificate
//! manager makes its key and proof of possession: a new
//! key of the type the projection asks for (`RSA3072`, `RSA4096`,
//! `ECDSAP256`, `ECDSAP384`, `ECDSAP521`, `ED25519`), written as one PEM
//! `PRIVATE KEY` block (PKCS#8), and a stub PKCS#10 request for it (empty
//! subject, no attributes) signed by it: SHA-256 with RSA, ECDSA with
//! SHA-256, -384 or -512 by curve, pure Ed25519. The PodCertificateRequest
//! carries the request; the signer reads the public key from it and the
//! API server checks its signature.
//!
//! For the node's own client certificate ([`node_client_key`]), as the
//! kubelet's certificate manager makes it: an ECDSA P-256 key and a request
//! with the subject the signer puts in the certificate (`O=system:nodes`,
//! `CN=system:node:<node>`, in the order and string types Go's
//! `x509.CreateCertificateRequest` writes), no names, no attributes.
//!
//! Key generation takes a while (RSA: up to seconds): call it off the
//! async runtime.

use getrandom::SysRng;
use p256::elliptic_curve::Generate;
use p256::pkcs8::{EncodePrivateKey, EncodePublicKey};

use crate::common::pem::pem;

/// A key and its proof.
pub(crate) struct KeyAndProof {
    /// The private key: one PEM `PRIVATE KEY` block.
    pub(crate) key_pem: Vec<u8>,
    /// The stub PKCS#10 request (DER).
    pub(crate) request: Vec<u8>,
}

/// Why no key could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    /// A key type the kubelet does not know.
    #[error("unknown key type {0:?}")]
    UnknownType(String),
    /// The key or its request could not be made.
    #[error("while generating {key_type} key: {reason}")]
    Generate {
        key_type: &'static str,
        reason: String,
    },
}

/// `ecdsa-with-SHA256`, `-SHA384`, `-SHA512` (RFC 5758).
const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
/// `sha256WithRSAEncryption` (RFC 4055).
const SHA256_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
/// `id-Ed25519` (RFC 8410).
const ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// An ECDSA key of curve crate `$curve`, signed with its own digest
/// (`$algorithm`): the same steps for each curve, whose types differ.
macro_rules! ecdsa_key {
    ($curve:ident, $name:literal, $algorithm:expr) => {{
        let key = $curve::ecdsa::SigningKey::try_generate_from_rng(&mut SysRng)
            .map_err(|e| failed($name, e))?;
        let public = key.verifying_key().to_public_key_der();
        let public = public.map_err(|e| failed($name, e))?;
        let info = request_info(&[], public.as_bytes());
        let signature: $curve::ecdsa::Signature =
            $curve::ecdsa::signature::Signer::sign(&key, &info);
        let pkcs8 = key.to_pkcs8_der().map_err(|e| failed($name, e))?;
        Ok(KeyAndProof {
            key_pem: pem("PRIVATE KEY", pkcs8.as_bytes()),
            request: request(info, $algorithm, false, signature.to_der().as_bytes()),
        })
    }};
}

/// A new key of `key_type` and its stub request.
pub(crate) fn generate(key_type: &str) -> Result<KeyAndProof, KeyError> {
    match key_type {
        "RSA3072" => rsa_key(3072, "RSA 3072"),
        "RSA4096" => rsa_key(4096, "RSA 4096"),
        "ECDSAP256" => ecdsa_key!(p256, "ECDSA P256", ECDSA_SHA256),
        "ECDSAP384" => ecdsa_key!(p384, "ECDSA P384", ECDSA_SHA384),
        "ECDSAP521" => ecdsa_key!(p521, "ECDSA P521", ECDSA_SHA512),
        "ED25519" => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| failed("Ed25519", e))?;
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            // SubjectPublicKeyInfo { id-Ed25519 } and the 32-byte key.
            let public = der(
                0x30,
                &[
                    der(0x30, &der(0x06, ED25519)),
                    der(
                        0x03,
                        &[&[0u8][..], &key.verifying_key().to_bytes()].concat(),
                    ),
                ]
                .concat(),
            );
            let info = request_info(&[], &public);
            let signature = ed25519_dalek::ed25519::signature::Signer::sign(&key, &info);
            // PKCS#8 v1 as Go writes it: the seed in an OCTET STRING.
            let pkcs8 = der(
                0x30,
                &[
                    der(0x02, &[0]),
                    der(0x30, &der(0x06, ED25519)),
                    der(0x04, &der(0x04, &seed)),
                ]
                .concat(),
            );
            Ok(KeyAndProof {
                key_pem: pem("PRIVATE KEY", &pkcs8),
                request: request(info, ED25519, false, &signature.to_bytes()),
            })
        }
        other => Err(KeyError::UnknownType(other.to_string())),
    }
}

/// An RSA key of `bits`, exponent 65537.
fn rsa_key(bits: usize, name: &'static str) -> Result<KeyAndProof, KeyError> {
    let key = rsa::PrivateKey::new(&mut SysRng, bits).map_err(|e| failed(name, e))?;
    let public = key.to_public_key().to_public_key_der();
    let public = public.map_err(|e| failed(name, e))?;
    let info = request_info(&[], public.as_bytes());
    let signature = key
        .pkcs1v15_sign::<rsa::sha2::Sha256>(&info)
        .map_err(|e| failed(name, e))?;
    let pkcs8 = key.to_pkcs8_der().map_err(|e| failed(name, e))?;
    Ok(KeyAndProof {
        key_pem: pem("PRIVATE KEY", pkcs8.as_bytes()),
        request: request(info, SHA256_WITH_RSA, true, &signature),
    })
}

fn failed(key_type: &'static str, error: impl std::fmt::Display) -> KeyError {
    KeyError::Generate {
        key_type,
        reason: error.to_string(),
    }
}

/// An ECDSA P-256 key (PKCS#8) and a request for a certificate of
/// `subject` (from [`subject`]), signed with it (ECDSA with SHA-256), and
/// the key's `SubjectPublicKeyInfo` (DER). The key is `existing` (PEM,
/// PKCS#8 or SEC 1, as the kubelet leaves it) when that is a P-256 key, so
/// that a request made again is the same request; else a new one.
pub(crate) fn node_client_key(
    existing: Option<&[u8]>,
    subject: &[u8],
) -> Result<(KeyAndProof, Vec<u8>), KeyError> {
    let name = "ECDSA P256";
    let key = match existing.and_then(p256_key) {
        Some(key) => key,
        None => p256::ecdsa::SigningKey::try_generate_from_rng(&mut SysRng)
            .map_err(|e| failed(name, e))?,
    };
    let public = key
        .verifying_key()
        .to_public_key_der()
        .map_err(|e| failed(name, e))?;
    let info = request_info(subject, public.as_bytes());
    let signature: p256::ecdsa::Signature = p256::ecdsa::signature::Signer::sign(&key, &info);
    let pkcs8 = key.to_pkcs8_der().map_err(|e| failed(name, e))?;
    let made = KeyAndProof {
        key_pem: pem("PRIVATE KEY", pkcs8.as_bytes()),
        request: request(info, ECDSA_SHA256, false, signature.to_der().as_bytes()),
    };
    Ok((made, public.as_bytes().to_vec()))
}

/// The P-256 key in `pem_text`: its first block that is one, as PKCS#8 or
/// SEC 1.
fn p256_key(pem_text: &[u8]) -> Option<p256::ecdsa::SigningKey> {
    use p256::pkcs8::DecodePrivateKey;
    let text = std::str::from_utf8(pem_text).ok()?;
    crate::common::pem::pem_blocks(text).iter().find_map(|der| {
        p256::ecdsa::SigningKey::from_pkcs8_der(der)
            .ok()
            .or_else(|| {
                p256::SecretKey::from_sec1_der(der)
                    .ok()
                    .map(p256::ecdsa::SigningKey::from)
            })
    })
}

/// `organizationName` (2.5.4.10) and `commonName` (2.5.4.3).
const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The DER of a subject with `organizations` (one RDN of them all) and a
/// `common_name`, in the order Go writes them (organizations first), each
/// a PrintableString when its characters allow, else a UTF8String.
pub(crate) fn subject(common_name: &str, organizations: &[&str]) -> Vec<u8> {
    let value = |text: &str| {
        let printable = text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b));
        der(if printable { 0x13 } else { 0x0c }, text.as_bytes())
    };
    let attribute = |oid: &[u8], text: &str| der(0x30, &[der(0x06, oid), value(text)].concat());
    let mut rdns = Vec::new();
    if !organizations.is_empty() {
        let all: Vec<u8> = organizations
            .iter()
            .flat_map(|o| attribute(ORGANIZATION, o))
            .collect();
        rdns.push(der(0x31, &all));
    }
    if !common_name.is_empty() {
        rdns.push(der(0x31, &attribute(COMMON_NAME, common_name)));
    }
    der(0x30, &rdns.concat())
}

/// `CertificationRequestInfo`: version 0, the subject (an empty one when
/// `subject` is empty), the public key, no attributes.
fn request_info(subject: &[u8], public_key_info: &[u8]) -> Vec<u8> {
    let subject = if subject.is_empty() {
        der(0x30, &[])
    } else {
        subject.to_vec()
    };
    der(
        0x30,
        &[
            der(0x02, &[0]),
            subject,
            public_key_info.to_vec(),
            der(0xa0, &[]),
        ]
        .concat(),
    )
}

/// `CertificationRequest`: the info, the algorithm (with NULL parameters
/// for RSA, as RFC 4055 and Go write them), the signature.
fn request(info: Vec<u8>, algorithm: &[u8], null_parameters: bool, signature: &[u8]) -> Vec<u8> {
    let mut algorithm = der(0x06, algorithm);
    if null_parameters {
        algorithm.extend_from_slice(&[0x05, 0x00]);
    }
    der(
        0x30,
        &[
            info,
            der(0x30, &algorithm),
            der(0x03, &[&[0u8][..], signature].concat()),
        ]
        .concat(),
    )
}

/// One DER element: `tag`, the definite length, `content`.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let length = content.len();
    match u8::try_from(length) {
        Ok(short) if short < 0x80 => out.push(short),
        _ => {
            let bytes = length.to_be_bytes();
            let first = bytes
                .iter()
                .position(|b| *b != 0)
                .unwrap_or(bytes.len() - 1);
            let count = bytes.len() - first;
            out.push(0x80 | u8::try_from(count).unwrap_or(0));
            out.extend_from_slice(&bytes[first..]);
        }
    }
    out.extend_from_slice(content);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn lengths_are_encoded_short_and_long() {
        assert_eq!(der(0x04, &[1, 2]), vec![0x04, 2, 1, 2]);
        let long = der(0x04, &[0; 200]);
        assert_eq!(&long[..3], &[0x04, 0x81, 200]);
        let longer = der(0x04, &[0; 300]);
        assert_eq!(&longer[..4], &[0x04, 0x82, 0x01, 0x2c]);
    }

    /// The first DER element of `der`: its tag, and its content.
    fn element(der: &[u8]) -> (u8, &[u8]) {
        let (length, start) = match der[1] {
            short if short < 0x80 => (usize::from(short), 2),
            long => {
                let count = usize::from(long & 0x7f);
                let length = der[2..2 + count]
                    .iter()
                    .fold(0usize, |n, b| (n << 8) | usize::from(*b));
                (length, 2 + count)
            }
        };
        assert_eq!(start + length, der.len(), "one element, all of it");
        (der[0], &der[start..])
    }

    #[test]
    fn each_key_type_gives_a_pkcs8_key_and_a_request_of_its_algorithm() {
        for (key_type, algorithm) in [
            ("ECDSAP256", ECDSA_SHA256),
            ("ECDSAP384", ECDSA_SHA384),
            ("ECDSAP521", ECDSA_SHA512),
            ("ED25519", ED25519),
            ("RSA3072", SHA256_WITH_RSA),
        ] {
            let made = generate(key_type).unwrap();
            let pem = String::from_utf8(made.key_pem).unwrap();
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{pem}");
            assert!(pem.ends_with("-----END PRIVATE KEY-----\n"), "{pem}");
            let (tag, _) = element(&made.request);
            assert_eq!(tag, 0x30, "{key_type}: a SEQUENCE");
            assert!(
                made.request
                    .windows(algorithm.len())
                    .any(|w| w == algorithm),
                "{key_type}: signed with its algorithm"
            );
        }
    }

    #[test]
    fn an_ed25519_key_is_written_as_go_writes_it() {
        let made = generate("ED25519").unwrap();
        let pem = String::from_utf8(made.key_pem).unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        use base64::Engine;
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        assert_eq!(der.len(), 48);
        assert_eq!(
            &der[..16],
            &[
                0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
                0x04, 0x20
            ]
        );
    }

    #[test]
    fn a_node_subject_is_written_as_go_writes_it() {
        // Go's pkix.Name{Organization: ["system:nodes"], CommonName:
        // "system:node:n1"}.ToRDNSequence(), marshalled: the organization
        // first, PrintableStrings.
        let expected: Vec<u8> = [
            &[
                0x30, 0x30, 0x31, 0x15, 0x30, 0x13, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x13, 0x0c,
            ][..],
            b"system:nodes",
            &[
                0x31, 0x17, 0x30, 0x15, 0x06, 0x03, 0x55, 0x04, 0x03, 0x13, 0x0e,
            ],
            b"system:node:n1",
        ]
        .concat();
        assert_eq!(subject("system:node:n1", &["system:nodes"]), expected);
        // An underscore is no PrintableString character: a UTF8String.
        let written = subject("system:node:a_b", &["system:nodes"]);
        let tail = [&[0x0c, 15][..], b"system:node:a_b"].concat();
        assert!(written.ends_with(&tail), "{written:x?}");
    }

    #[test]
    fn a_node_client_key_signs_a_request_with_its_subject() {
        let name = subject("system:node:n1", &["system:nodes"]);
        let (made, public) = node_client_key(None, &name).unwrap();
        let (tag, _) = element(&made.request);
        assert_eq!(tag, 0x30);
        assert!(made.request.windows(name.len()).any(|w| w == name));
        assert!(made.request.windows(public.len()).any(|w| w == public));
        let pem = String::from_utf8(made.key_pem.clone()).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{pem}");
        // Made again from its key: the same key, so the same request name.
        let (again, same) = node_client_key(Some(&made.key_pem), &name).unwrap();
        assert_eq!(same, public);
        assert_eq!(again.key_pem, made.key_pem);
        // Garbage or another kind of key: a new key.
        let (other, new) = node_client_key(Some(b"not a key"), &name).unwrap();
        assert_ne!(new, public);
        assert_ne!(other.key_pem, made.key_pem);
    }

    #[test]
    fn a_sec1_key_the_kubelet_left_is_taken_again() {
        // What the kubelet's bootstrap writes to kubelet-client.key.tmp:
        // an `EC PRIVATE KEY` (SEC 1) P-256 key.
        let out = std::process::Command::new("openssl")
            .args(["ecparam", "-name", "prime256v1", "-genkey", "-noout"])
            .output()
            .expect("run openssl");
        assert!(out.status.success());
        let sec1 = out.stdout;
        assert!(String::from_utf8_lossy(&sec1).starts_with("-----BEGIN EC PRIVATE KEY-----"));
        let name = subject("system:node:n1", &["system:nodes"]);
        let (first, public) = node_client_key(Some(&sec1), &name).unwrap();
        let (_, again) = node_client_key(Some(&sec1), &name).unwrap();
        assert_eq!(public, again, "the same key both times");
        let (_, from_pkcs8) = node_client_key(Some(&first.key_pem), &name).unwrap();
        assert_eq!(public, from_pkcs8, "written as PKCS#8, the same key");
    }

    #[test]
    fn an_unknown_key_type_is_refused_with_the_kubelets_words() {
        let error = generate("DSA1024").err().unwrap();
        assert_eq!(error.to_string(), "unknown key type \"DSA1024\"");
    }
}

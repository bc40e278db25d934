//! The CertificateSigningRequest of the node's client certificate, made
//! and waited for as client-go's `csr` package does for the kubelet.
//!
//! Made with signer `kubernetes.io/kube-apiserver-client-kubelet`, the
//! request as one PEM `CERTIFICATE REQUEST` block and the usages the
//! kubelet asks for an ECDSA key (`digital signature`, `client auth`).
//! A bootstrap without rotation names its request `node-csr-<digest>` (the kubelet's
//! `digestedName`: SHA-512/256 over the key, subject and usages, each
//! base64url and a `|`), so that asking again after a restart finds the
//! same one: an existing request of that name is taken when its subject,
//! signer and key are this one's and its certificate has not expired. With
//! rotation on, the kubelet's certificate manager asks for the first
//! certificate as for every later one, and the API server names the
//! request (`csr-` and a suffix); so does the agent.
//!
//! Then one watch of that name (and a read every 5 s beside it) until the
//! request is approved and has its certificate; denied, failed, deleted,
//! or made again under another UID ends the wait with the kubelet's words.

use std::time::{Duration, SystemTime};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use sha2::Digest;

use crate::common::pem::pem;
use crate::kube_api::client_certificate::certificate::certificates;
use crate::kube_api::client_certificate::error::ClientCertificateError;

/// The signer of kubelets' client certificates.
pub(crate) const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// What an ECDSA client certificate is asked for.
pub(crate) const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];

/// A node's key and its request, made off the async runtime.
pub(crate) struct NodeRequest {
    /// The key (PEM) and the request (DER).
    pub(crate) key: crate::common::certificate_key::KeyAndProof,
    public_key: Vec<u8>,
    subject: Vec<u8>,
    common_name: String,
}

/// What a node's certificate is issued to.
const NODE_ORGANIZATIONS: [&str; 1] = ["system:nodes"];

impl NodeRequest {
    /// The request of node `node`'s client certificate, with the key in
    /// `existing` (PEM) when it is a P-256 key, else a new one.
    pub(crate) async fn make(
        node: &str,
        existing: Option<Vec<u8>>,
    ) -> Result<Self, ClientCertificateError> {
        let common_name = format!("system:node:{node}");
        let subject = crate::common::certificate_key::subject(&common_name, &NODE_ORGANIZATIONS);
        let invalid = |reason: String| ClientCertificateError::Invalid {
            what: "the key".into(),
            reason,
        };
        let made = {
            let subject = subject.clone();
            tokio::task::spawn_blocking(move || {
                crate::common::certificate_key::node_client_key(existing.as_deref(), &subject)
            })
            .await
        };
        let (key, public_key) = made
            .map_err(|e| invalid(e.to_string()))?
            .map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            key,
            public_key,
            subject,
            common_name,
        })
    }

    /// What it asks for.
    pub(crate) fn asked(&self) -> Asked<'_> {
        Asked {
            request: &self.key.request,
            subject: &self.subject,
            public_key: &self.public_key,
            common_name: &self.common_name,
            organizations: &NODE_ORGANIZATIONS,
        }
    }
}

/// What the request asks for.
pub(crate) struct Asked<'a> {
    /// The PKCS#10 request (DER).
    pub(crate) request: &'a [u8],
    /// Its subject (DER) and key (`SubjectPublicKeyInfo`, DER).
    pub(crate) subject: &'a [u8],
    pub(crate) public_key: &'a [u8],
    /// Its common name and organizations, for the name's digest.
    pub(crate) common_name: &'a str,
    pub(crate) organizations: &'a [&'a str],
}

/// How often a request waited for is read besides its watch.
const REREAD: Duration = Duration::from_secs(5);

/// The kubelet's bootstrap request name: `node-csr-` and the base64url
/// (no padding) SHA-512/256 of the key, the common name, each organization
/// and each usage, each written base64url and followed by `|`.
pub(crate) fn digested_name(asked: &Asked<'_>) -> String {
    let encode = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    let mut hash = sha2::Sha512_256::new();
    let mut write = |data: &[u8]| {
        hash.update(encode(data).as_bytes());
        hash.update(b"|");
    };
    write(asked.public_key);
    write(asked.common_name.as_bytes());
    for organization in asked.organizations {
        write(organization.as_bytes());
    }
    for usage in CLIENT_USAGES {
        write(usage.as_bytes());
    }
    format!("node-csr-{}", encode(&hash.finalize()))
}

/// Makes the request (named `name`, or by the API server when `None`) and
/// gives its name and UID; an existing request of `name` is taken when it
/// is this one's.
pub(crate) async fn request_certificate(
    client: &kube::Client,
    asked: &Asked<'_>,
    name: Option<&str>,
) -> Result<(String, String), ClientCertificateError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let object = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            generate_name: name.is_none().then(|| "csr-".to_string()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem("CERTIFICATE REQUEST", asked.request)),
            signer_name: KUBELET_CLIENT_SIGNER.to_string(),
            usages: Some(CLIENT_USAGES.iter().map(|u| u.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let failed = |what: &str, e: kube::Error| ClientCertificateError::Request {
        name: name.unwrap_or("csr-*").to_string(),
        reason: format!("{what}: {e}"),
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(made) => Ok(name_and_uid(&made)),
        Err(kube::Error::Api(status)) if status.code == 409 && name.is_some() => {
            let name = name.unwrap_or_default();
            let existing = api
                .get(name)
                .await
                .map_err(|e| failed("cannot retrieve certificate signing request", e))?;
            compatible(&existing, asked).map_err(|reason| ClientCertificateError::Request {
                name: name.to_string(),
                reason: format!("retrieved csr is not compatible: {reason}"),
            })?;
            tracing::info!(csr = name, "csr for this node already exists, reusing");
            Ok(name_and_uid(&existing))
        }
        Err(e) => Err(failed("cannot create certificate signing request", e)),
    }
}

fn name_and_uid(csr: &CertificateSigningRequest) -> (String, String) {
    (
        csr.metadata.name.clone().unwrap_or_default(),
        csr.metadata.uid.clone().unwrap_or_default(),
    )
}

/// Whether `existing` asks for what `asked` asks for (client-go's
/// `ensureCompatible`): the same subject, signer and key, and no expired
/// certificate.
fn compatible(existing: &CertificateSigningRequest, asked: &Asked<'_>) -> Result<(), String> {
    let text = String::from_utf8_lossy(&existing.spec.request.0);
    let der = crate::common::pem::pem_blocks(&text)
        .into_iter()
        .next()
        .ok_or("unable to parse original csr: no PEM block")?;
    let (_, request) = <x509_parser::certification_request::X509CertificationRequest<'_> as x509_parser::prelude::FromDer<'_, x509_parser::error::X509Error>>::from_der(&der)
        .map_err(|e| format!("unable to parse original csr: {e}"))?;
    let info = &request.certification_request_info;
    if info.subject.as_raw() != asked.subject {
        return Err(format!("csr subjects differ: {}", info.subject));
    }
    if existing.spec.signer_name != KUBELET_CLIENT_SIGNER {
        return Err(format!(
            "csr signerNames differ: new {KUBELET_CLIENT_SIGNER:?}, orig: {:?}",
            existing.spec.signer_name
        ));
    }
    if info.subject_pki.raw != asked.public_key {
        return Err("error validating signature new CSR against old key".into());
    }
    if let Some(issued) = existing
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
    {
        let now = SystemTime::now();
        let certs = certificates(&String::from_utf8_lossy(&issued.0))
            .map_err(|e| format!("error parsing signed certificate for CSR: {e}"))?;
        if certs.iter().any(|c| now > c.not_after) {
            return Err("one of the certificates for the CSR has expired".into());
        }
    }
    Ok(())
}

/// The certificate (PEM) issued for request `name` of `uid`, waited for up
/// to `timeout`.
pub(crate) async fn wait_for_certificate(
    client: &kube::Client,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> Result<Vec<u8>, ClientCertificateError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api.clone(), config).boxed();
    // The request is also read every few seconds: a watch that stalls
    // (its connection closed under it by a rotation) does not hold the
    // wait up to its deadline.
    let mut reread = tokio::time::interval(REREAD);
    reread.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    reread.tick().await;
    let wait = async {
        loop {
            let csr = tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(csr) | watcher::Event::InitApply(csr))) => csr,
                    Some(Ok(watcher::Event::Delete(_))) => {
                        return Err(ClientCertificateError::NotIssued(format!(
                            "csr {name:?} was deleted"
                        )));
                    }
                    Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => continue,
                    Some(Err(e)) => {
                        // The watch starts again by itself; the deadline
                        // bounds it.
                        tracing::debug!(csr = name, error = %e, "watching the certificate signing request");
                        continue;
                    }
                    None => {
                        return Err(ClientCertificateError::NotIssued(format!(
                            "the watch of csr {name:?} ended"
                        )));
                    }
                },
                _ = reread.tick() => match api.get_opt(name).await {
                    Ok(Some(csr)) => csr,
                    Ok(None) => {
                        return Err(ClientCertificateError::NotIssued(format!(
                            "csr {name:?} was deleted"
                        )));
                    }
                    Err(e) => {
                        tracing::debug!(csr = name, error = %e, "reading the certificate signing request");
                        continue;
                    }
                },
            };
            if let Some(issued) = issued(&csr, name, uid)? {
                return Ok(issued);
            }
        }
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(result) => result,
        Err(_) => Err(ClientCertificateError::NotIssued(format!(
            "certificate signing request {name} was not issued within {timeout:?}"
        ))),
    }
}

/// The certificate of `csr` when it is approved and has one; an error
/// when it is denied, failed or another request of the same name.
fn issued(
    csr: &CertificateSigningRequest,
    name: &str,
    uid: &str,
) -> Result<Option<Vec<u8>>, ClientCertificateError> {
    if csr.metadata.uid.as_deref().unwrap_or_default() != uid {
        return Err(ClientCertificateError::NotIssued(format!(
            "csr {name:?} changed UIDs"
        )));
    }
    let Some(status) = &csr.status else {
        return Ok(None);
    };
    let mut approved = false;
    for condition in status.conditions.iter().flatten() {
        let reason = condition.reason.as_deref().unwrap_or_default();
        let message = condition.message.as_deref().unwrap_or_default();
        match condition.type_.as_str() {
            "Denied" => {
                return Err(ClientCertificateError::NotIssued(format!(
                    "certificate signing request is denied, reason: {reason}, message: {message}"
                )));
            }
            "Failed" => {
                return Err(ClientCertificateError::NotIssued(format!(
                    "certificate signing request failed, reason: {reason}, message: {message}"
                )));
            }
            "Approved" => approved = true,
            _ => {}
        }
    }
    match &status.certificate {
        Some(certificate) if approved && !certificate.0.is_empty() => {
            tracing::info!(csr = name, "certificate signing request is issued");
            Ok(Some(certificate.0.clone()))
        }
        _ => {
            if approved {
                tracing::info!(
                    csr = name,
                    "certificate signing request is approved, waiting to be issued"
                );
            }
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_bootstrap_name_is_the_kubelets_digest() {
        // The kubelet's digestedName over the same inputs (a key of 3
        // bytes, so the expected value is computed here the same way by
        // hand): base64url of each part, a '|' after each.
        let asked = Asked {
            request: &[],
            subject: &[],
            public_key: &[1, 2, 3],
            common_name: "system:node:n1",
            organizations: &["system:nodes"],
        };
        let mut hash = sha2::Sha512_256::new();
        hash.update(
            b"AQID|c3lzdGVtOm5vZGU6bjE|c3lzdGVtOm5vZGVz|ZGlnaXRhbCBzaWduYXR1cmU|Y2xpZW50IGF1dGg|",
        );
        let expected = format!(
            "node-csr-{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.finalize())
        );
        assert_eq!(digested_name(&asked), expected);
        assert_eq!(expected.len(), "node-csr-".len() + 43);
    }
}

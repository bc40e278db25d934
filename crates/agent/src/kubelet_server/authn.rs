//! Authentication as the kubelet's (its delegating authenticator, in
//! order): a client certificate chained to the client CA with client
//! authentication in its usage (user: its common name; groups: its
//! organizations); a bearer token, reviewed by the API server
//! (TokenReview, each answer kept 2 minutes); anonymous, when enabled
//! (`system:anonymous` in `system:unauthenticated`). A request that is
//! none of these is a 401.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenReview;
use kube::Api;
use kube::api::PostParams;
use rustls::pki_types::{CertificateDer, UnixTime};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;

use super::tls::ChainCheck;
use crate::kube_api::Connection;

/// Who a request comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

/// Why no user could be had (logged; the request gets a 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthnError {
    #[error("client certificate: {0}")]
    Certificate(String),
    #[error("token review: {0}")]
    TokenReview(String),
    #[error("the token was not accepted")]
    TokenRejected,
}

/// Authenticates requests.
pub(crate) struct Authenticator {
    chain: Option<ChainCheck>,
    /// The API, when tokens are reviewed.
    tokens: Option<watch::Receiver<Connection>>,
    token_ttl: Duration,
    anonymous: bool,
    /// sha256(token) → (user, until); `None`: rejected.
    cache: Mutex<HashMap<[u8; 32], CachedReview>>,
}

/// A token's review: its user (`None`: rejected) and until when it stands.
type CachedReview = (Option<User>, Instant);

impl Authenticator {
    pub(crate) fn new(
        chain: Option<ChainCheck>,
        tokens: Option<watch::Receiver<Connection>>,
        token_ttl: Duration,
        anonymous: bool,
    ) -> Self {
        Self {
            chain,
            tokens,
            token_ttl,
            anonymous,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The user of a request with the client's `certificates` (leaf
    /// first) and `headers`; `Ok(None)`: no credentials, and anonymous
    /// requests are not allowed.
    pub(crate) async fn authenticate(
        &self,
        certificates: &[CertificateDer<'static>],
        headers: &http::HeaderMap,
    ) -> Result<Option<User>, AuthnError> {
        let mut failure = None;
        if let (Some(chain), Some((leaf, intermediates))) =
            (&self.chain, certificates.split_first())
        {
            match chain.verify_client_cert(leaf, intermediates, UnixTime::now()) {
                Ok(_) => return certificate_user(leaf).map(Some),
                Err(e) => failure = Some(AuthnError::Certificate(e.to_string())),
            }
        }
        if let (Some(connection), Some(token)) = (&self.tokens, bearer_token(headers)) {
            return self.review(connection, token).await.map(Some);
        }
        if self.anonymous {
            return Ok(Some(User {
                name: "system:anonymous".to_string(),
                groups: vec!["system:unauthenticated".to_string()],
                ..User::default()
            }));
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    async fn review(
        &self,
        connection: &watch::Receiver<Connection>,
        token: &str,
    ) -> Result<User, AuthnError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.retain(|_, (_, until)| *until > now);
            if let Some((user, _)) = cache.get(&key) {
                return user.clone().ok_or(AuthnError::TokenRejected);
            }
        }
        // Made from JSON: the spec's `token` is optional in the older
        // Kubernetes versions an application may pick and required in
        // the newer ones.
        let review: TokenReview = serde_json::from_value(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }))
        .map_err(|e| AuthnError::TokenReview(e.to_string()))?;
        let client = connection.borrow().client.clone();
        let answer = Api::<TokenReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AuthnError::TokenReview(e.to_string()))?;
        let user = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .map(|u| User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            });
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(key, (user.clone(), now + self.token_ttl));
        user.ok_or(AuthnError::TokenRejected)
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The user a verified certificate names: its common name, and its
/// organizations as groups.
fn certificate_user(leaf: &CertificateDer<'_>) -> Result<User, AuthnError> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| AuthnError::Certificate(e.to_string()))?;
    let subject = cert.subject();
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().map(str::to_string).ok()
    };
    let name = subject
        .iter_common_name()
        .next()
        .and_then(text)
        .unwrap_or_default();
    let groups = subject.iter_organization().filter_map(text).collect();
    Ok(User {
        name,
        groups,
        ..User::default()
    })
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test with a precise location.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn headers(value: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(value).unwrap_or(http::HeaderValue::from_static("")),
        );
        headers
    }

    #[test]
    fn a_bearer_token_is_read_in_any_case_of_the_scheme() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer abc def")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&http::HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn without_credentials_a_request_is_anonymous_only_when_enabled() {
        let closed = Authenticator::new(None, None, Duration::from_secs(1), false);
        assert_eq!(
            closed.authenticate(&[], &http::HeaderMap::new()).await,
            Ok(None)
        );
        let open = Authenticator::new(None, None, Duration::from_secs(1), true);
        let user = open
            .authenticate(&[], &http::HeaderMap::new())
            .await
            .unwrap();
        assert_eq!(
            user.map(|u| (u.name, u.groups)),
            Some((
                "system:anonymous".to_string(),
                vec!["system:unauthenticated".to_string()]
            ))
        );
    }
}

//! Service-account tokens for pods' projected volumes, as the kubelet's
//! token manager gets them: `POST serviceaccounts/<sa>/token` bound to the
//! pod (`boundObjectRef` Pod, name and UID), with the audience and expiry
//! the volume asks for; kept, and asked for again once 80% of its life
//! passed (less up to 10 s of jitter) or it is older than 24 h. A token
//! that cannot be renewed is used until it expires. A pod's tokens are
//! forgotten with its volumes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

use crate::kube_api::Connection;

/// A token older than this is renewed whatever its expiry.
const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Up to this much earlier than 80% of its life.
const MAX_JITTER: Duration = Duration::from_secs(10);

/// What a token is asked for with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TokenKey {
    pub(crate) namespace: String,
    pub(crate) service_account: String,
    pub(crate) audience: String,
    /// Its lifetime; none asked for: the API server's default (an hour).
    pub(crate) expiration_seconds: Option<i64>,
    pub(crate) pod_name: String,
    pub(crate) pod_uid: String,
}

#[derive(Debug, Clone)]
struct Token {
    token: String,
    issued: SystemTime,
    expires: SystemTime,
}

impl Token {
    /// Whether it is due for renewal at `now`.
    fn requires_refresh(&self, now: SystemTime) -> bool {
        let life = self.expires.duration_since(self.issued).unwrap_or_default();
        let jitter = MAX_JITTER.mul_f64(rand::random::<f64>());
        let due = self.issued + life.mul_f64(0.8);
        let due = due.checked_sub(jitter).unwrap_or(due);
        now > due || now.duration_since(self.issued).unwrap_or_default() > MAX_TTL
    }
}

/// Why a token could not be had.
#[derive(Debug, Clone, thiserror::Error)]
#[error("failed to fetch token: {0}")]
pub(crate) struct TokenError(String);

/// The tokens of the node's pods.
pub(crate) struct TokenManager {
    connection: watch::Receiver<Connection>,
    tokens: Mutex<HashMap<TokenKey, Token>>,
}

impl TokenManager {
    /// Tokens asked for through `connection`'s client.
    pub(crate) fn new(connection: watch::Receiver<Connection>) -> Self {
        Self {
            connection,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// The token for `key`: the one kept while it is fresh, else a new
    /// one (or the one kept, while it has not expired, when asking fails).
    pub(crate) async fn token(&self, key: &TokenKey) -> Result<String, TokenError> {
        self.issued(key).await.map(|(token, _)| token)
    }

    /// The token for `key`, as [`token`](Self::token) gives it, and when it
    /// expires.
    pub(crate) async fn issued(&self, key: &TokenKey) -> Result<(String, SystemTime), TokenError> {
        let now = SystemTime::now();
        let kept = self.tokens.lock().ok().and_then(|t| t.get(key).cloned());
        if let Some(kept) = &kept
            && !kept.requires_refresh(now)
        {
            return Ok((kept.token.clone(), kept.expires));
        }
        match self.request(key).await {
            Ok(token) => {
                let issued = (token.token.clone(), token.expires);
                if let Ok(mut tokens) = self.tokens.lock() {
                    tokens.insert(key.clone(), token);
                }
                Ok(issued)
            }
            Err(e) => match kept {
                Some(kept) if kept.expires > now => {
                    tracing::warn!(service_account = %key.service_account, error = %e, "cannot renew a pod's token; using the one it has until it expires");
                    Ok((kept.token, kept.expires))
                }
                _ => Err(e),
            },
        }
    }

    /// Forgets pod `uid`'s tokens.
    pub(crate) fn forget_pod(&self, uid: &str) {
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.retain(|key, _| key.pod_uid != uid);
        }
    }

    async fn request(&self, key: &TokenKey) -> Result<Token, TokenError> {
        let client = self.connection.borrow().client.clone();
        let accounts: Api<ServiceAccount> = Api::namespaced(client, &key.namespace);
        // Written as JSON: the TokenRequest types' optional fields differ
        // between the Kubernetes versions an application may pick.
        let mut spec = serde_json::json!({
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": key.pod_name,
                "uid": key.pod_uid,
            },
        });
        if let Some(seconds) = key.expiration_seconds {
            spec["expirationSeconds"] = serde_json::json!(seconds);
        }
        if !key.audience.is_empty() {
            spec["audiences"] = serde_json::json!([key.audience]);
        }
        let request = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec,
        });
        let issued = SystemTime::now();
        let answer: serde_json::Value = accounts
            .create_subresource(
                "token",
                &key.service_account,
                &PostParams::default(),
                &request,
            )
            .await
            .map_err(|e| TokenError(e.to_string()))?;
        let status = &answer["status"];
        let (Some(token), Some(expires)) = (
            status["token"].as_str(),
            status["expirationTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok()),
        ) else {
            return Err(TokenError("the API server answered no token".into()));
        };
        let expires = SystemTime::from(expires);
        let token = token.to_string();
        Ok(Token {
            token,
            issued,
            expires,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_after_80_percent_of_its_life_or_a_day() {
        let issued = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let token = Token {
            token: "t".into(),
            issued,
            expires: issued + Duration::from_secs(3600),
        };
        assert!(!token.requires_refresh(issued + Duration::from_secs(2800)));
        assert!(token.requires_refresh(issued + Duration::from_secs(2881)));
        let long = Token {
            expires: issued + Duration::from_secs(365 * 24 * 3600),
            ..token
        };
        assert!(!long.requires_refresh(issued + Duration::from_secs(23 * 3600)));
        assert!(long.requires_refresh(issued + Duration::from_secs(25 * 3600)));
    }
}

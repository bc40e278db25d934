//! Who the API server takes the agent for (a `SelfSubjectReview`, which
//! every authenticated user may make), checked against the node it writes
//! for: a node identity (`system:node:<name>`) of another node would have
//! every write refused, one 403 after another, so the agent stops at once
//! with one line saying so. A pod's service account names its node in
//! `authentication.kubernetes.io/node-name`; it is checked the same way.
//! Anything else (an admin, a service account without a node) may write
//! for any node its RBAC allows.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Api;
use kube::api::PostParams;

use super::error::{KubeApiError, request};

/// The prefix of a node identity's user name.
const NODE_USER_PREFIX: &str = "system:node:";
/// The extra field naming the node a pod's service account token is bound
/// to.
const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// Who the API server says the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WhoAmI {
    /// The user name.
    pub(crate) user: String,
    /// The node the identity is for, if it is a node's or bound to one.
    pub(crate) node: Option<String>,
}

/// Asks the API server who `client` is.
pub(crate) async fn who_am_i(client: &kube::Client) -> Result<WhoAmI, KubeApiError> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = request(
        || "create selfsubjectreview".to_string(),
        reviews.create(&PostParams::default(), &SelfSubjectReview::default()),
    )
    .await?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    Ok(identity(
        user.username.unwrap_or_default(),
        user.extra.unwrap_or_default(),
    ))
}

fn identity(user: String, extra: std::collections::BTreeMap<String, Vec<String>>) -> WhoAmI {
    let node = match user.strip_prefix(NODE_USER_PREFIX) {
        Some(node) => Some(node.to_string()),
        None => extra
            .get(NODE_NAME_EXTRA)
            .and_then(|names| names.first())
            .cloned(),
    };
    WhoAmI { user, node }
}

/// Whether `who` may write for node `node`.
pub(crate) fn check(who: &WhoAmI, node: &str) -> Result<(), KubeApiError> {
    match &who.node {
        Some(identity) if identity != node => Err(KubeApiError::WrongNode {
            node: node.to_string(),
            identity: identity.clone(),
            user: who.user.clone(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_identity_writes_only_for_its_own_node() {
        let who = identity("system:node:node-2".into(), Default::default());
        assert_eq!(who.node.as_deref(), Some("node-2"));
        assert!(check(&who, "node-2").is_ok());
        let refused = check(&who, "node-1").unwrap_err().to_string();
        assert_eq!(
            refused,
            "the API credentials are node node-2's (system:node:node-2), not node node-1's: every write would be refused; use node node-1's credentials, or --node-name node-2"
        );
    }

    #[test]
    fn a_service_account_bound_to_a_node_is_checked_too_and_others_pass() {
        let extra = [(NODE_NAME_EXTRA.to_string(), vec!["node-3".to_string()])].into();
        let bound = identity("system:serviceaccount:kube-system:agent".into(), extra);
        assert!(check(&bound, "node-1").is_err());
        assert!(check(&bound, "node-3").is_ok());
        let admin = identity("admin".into(), Default::default());
        assert!(check(&admin, "any-node").is_ok());
    }
}

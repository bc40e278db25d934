//! Who the API server takes the agent for (a `SelfSubjectReview`, which
//! every authenticated user may make), checked against the node it writes
//! for: a node identity (`system:node:<name>`) of another node would have
//! every write refused, one 403 after another, so the agent stops at once
//! with one line saying so. A pod's service account names its node in
//! `authentication.kubernetes.io/node-name`; it is checked the same way.
//! Anything else (an admin, a service account without a node) may write
//! for any node its RBAC allows.

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::Retry;
use nodeplugins_api::timer::sleep_until;

use crate::kube_api::client::credentials::Connection;
use crate::kube_api::error::{KubeApiError, request};
use crate::kube_api::writes::report::Reporter;

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

/// Asking who the credentials are, until the server answers.
pub(crate) struct IdentityCheck {
    node: String,
    backoff: Backoff,
    /// Failed asks in a row.
    pub(crate) failures: Retry<Arc<KubeApiError>>,
}

impl IdentityCheck {
    /// For the agent writing as `node`, asking again after `backoff`.
    pub(crate) fn new(node: String, backoff: Backoff) -> Self {
        Self {
            node,
            backoff,
            failures: Retry::default(),
        }
    }

    /// Asks at start and after each change of the credentials
    /// (`connection`), again with backoff until answered, and tells
    /// `reporter` who they are; until `shutdown`, or with the error when
    /// the credentials are another node's.
    pub(crate) async fn run(
        mut self,
        mut connection: watch::Receiver<Connection>,
        reporter: Reporter,
        shutdown: CancellationToken,
    ) -> Result<(), KubeApiError> {
        loop {
            let client = connection.borrow_and_update().client.clone();
            let answer = tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                Ok(()) = connection.changed() => {
                    self.failures = Retry::default();
                    continue;
                }
                answer = who_am_i(&client) => answer,
            };
            let due = match self.answered(answer, Instant::now())? {
                Some(who) => {
                    tracing::info!(user = %who.user, "the API server knows the agent as this user");
                    reporter.user(Some(who.user));
                    None
                }
                None => self.failures.due_at(),
            };
            // Asked again when due after a failure, or with new credentials.
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                Ok(()) = connection.changed() => self.failures = Retry::default(),
                () = sleep_until(due) => {}
            }
        }
    }

    /// The server answered: who the credentials are, once they are known
    /// (`None`: asked again when [`Retry::due_at`] says); an error when
    /// they are another node's.
    pub(crate) fn answered(
        &mut self,
        answer: Result<WhoAmI, KubeApiError>,
        now: Instant,
    ) -> Result<Option<WhoAmI>, KubeApiError> {
        match answer {
            Ok(who) => {
                self.failures.succeeded();
                check(&who, &self.node)?;
                Ok(Some(who))
            }
            Err(e) => {
                self.failures.failed(Arc::new(e), &self.backoff, now);
                let retry_in = self.failures.retry_in(now);
                tracing::debug!(error = ?self.failures.last_error().map(ToString::to_string), ?retry_in, "who the API server takes the agent for is not known yet");
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kube_api::node::node_status_writer::tests::answered;

    const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

    #[test]
    fn credentials_of_another_node_end_the_check() {
        let mut check = IdentityCheck::new("node-1".into(), BACKOFF);
        let mine = identity("system:node:node-1".into(), Default::default());
        let known = check.answered(Ok(mine.clone()), Instant::now()).unwrap();
        assert_eq!(known, Some(mine));
        let other = identity("system:node:node-2".into(), Default::default());
        let fatal = check.answered(Ok(other), Instant::now()).unwrap_err();
        assert!(matches!(fatal, KubeApiError::WrongNode { .. }), "{fatal}");
    }

    #[test]
    fn an_unknown_identity_is_asked_again_with_backoff() {
        let mut check = IdentityCheck::new("node-1".into(), BACKOFF);
        let before = Instant::now();
        let unknown = check.answered(Err(answered(503)), before).unwrap();
        assert_eq!(unknown, None);
        assert!(check.failures.due_at().unwrap() >= before + BACKOFF.delay(1));
        check.answered(Err(answered(503)), before).unwrap();
        assert!(check.failures.due_at().unwrap() >= before + BACKOFF.delay(2));
        assert_eq!(check.failures.failures(), 2);
    }

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

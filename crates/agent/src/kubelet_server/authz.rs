//! Authorization as the kubelet's: a request becomes one or more attribute
//! sets on the node's `nodes/<subresource>` (the kubelet's
//! `NodeAuthorizerAttributesGetter`, with its fine-grained subresources,
//! GA in 1.36), and each set is a SubjectAccessReview; the request is
//! allowed when any is. Answers are kept a while (allowed 5 minutes,
//! denied 30 seconds), as the kubelet's delegating authorizer keeps them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

use super::authn::User;
use super::config::AuthorizationMode;
use crate::kube_api::Connection;
use tokio::time::Instant;

/// What a request asks of the node, as one SubjectAccessReview asks it:
/// `verb` on `nodes/<subresource>` named `name`, in the core group `v1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// From the method: `get`, `create`, `update`, `patch`, `delete`
    /// (empty for another method).
    pub verb: &'static str,
    /// The node's subresource (`proxy`, `log`, `stats`, `metrics`,
    /// `pods`, `healthz`, `configz`, `checkpoint`, `statusz`).
    pub subresource: &'static str,
    /// The node.
    pub name: String,
    /// The request's path.
    pub path: String,
}

/// Path prefixes and the subresources they ask for, in order; any other
/// path asks for `proxy`.
const SUBRESOURCES: &[(&str, &[&str])] = &[
    ("/stats", &["stats"]),
    ("/metrics", &["metrics"]),
    ("/logs", &["log"]),
    ("/checkpoint", &["checkpoint"]),
    ("/statusz", &["statusz"]),
    ("/flagz", &["configz"]),
    ("/pods", &["pods", "proxy"]),
    ("/runningpods", &["pods", "proxy"]),
    ("/allocatedPods", &["pods", "proxy"]),
    ("/healthz", &["healthz", "proxy"]),
    ("/configz", &["configz", "proxy"]),
];

/// Whether `path` is `prefix` or below it.
fn is_subpath(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The attribute sets of a `method` request for `path` on node `node`, in
/// the order they are asked.
pub fn request_attributes(node: &str, method: &http::Method, path: &str) -> Vec<Attributes> {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::GET => "get",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "",
    };
    let subresources = SUBRESOURCES
        .iter()
        .find(|(prefix, _)| is_subpath(path, prefix))
        .map_or(&["proxy"][..], |(_, subresources)| subresources);
    subresources
        .iter()
        .map(|subresource| Attributes {
            verb,
            subresource,
            name: node.to_string(),
            path: path.to_string(),
        })
        .collect()
}

/// How the request was judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    Deny,
    /// A review could not be had: the message for the 500.
    Error(String),
}

/// Judges requests.
pub(crate) struct Authorizer {
    mode: AuthorizationMode,
    connection: watch::Receiver<Connection>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    /// (user, groups, attributes) → (allowed, until).
    cache: Mutex<HashMap<ReviewKey, (bool, Instant)>>,
}

/// What a review is asked about: the user, their groups and the attributes.
type ReviewKey = (String, Vec<String>, Attributes);

impl Authorizer {
    pub(crate) fn new(
        mode: AuthorizationMode,
        connection: watch::Receiver<Connection>,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Self {
        Self {
            mode,
            connection,
            allowed_ttl,
            denied_ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `user` may do what `attributes` say: allowed when any set
    /// is.
    pub(crate) async fn authorize(&self, user: &User, attributes: &[Attributes]) -> Decision {
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Decision::Allow;
        }
        let mut error = None;
        for attrs in attributes {
            match self.review(user, attrs).await {
                Ok(true) => return Decision::Allow,
                Ok(false) => {}
                Err(e) => error = Some(e),
            }
        }
        match error {
            Some(e) => Decision::Error(e),
            None => Decision::Deny,
        }
    }

    async fn review(&self, user: &User, attrs: &Attributes) -> Result<bool, String> {
        let key = (user.name.clone(), user.groups.clone(), attrs.clone());
        let now = Instant::now();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.retain(|_, (_, until)| *until > now);
            if let Some((allowed, _)) = cache.get(&key) {
                return Ok(*allowed);
            }
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.to_string()),
                    group: Some(String::new()),
                    version: Some("v1".to_string()),
                    resource: Some("nodes".to_string()),
                    subresource: Some(attrs.subresource.to_string()),
                    name: Some(attrs.name.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let client = self.connection.borrow().client.clone();
        let answer = Api::<SubjectAccessReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| e.to_string())?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        let ttl = if allowed {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(key, (allowed, now + ttl));
        Ok(allowed)
    }
}

/// The kubelet's text of a refusal or an error: `<what> (user=<u>,
/// verb=<v>, resource=nodes, subresource(s)=[<s> ...])`.
pub(crate) fn describe(what: &str, user: &User, attributes: &[Attributes]) -> String {
    let verb = attributes.first().map_or("", |a| a.verb);
    let subresources: Vec<&str> = attributes.iter().map(|a| a.subresource).collect();
    format!(
        "{what} (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])",
        user.name,
        subresources.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subresources(method: http::Method, path: &str) -> Vec<(&'static str, &'static str)> {
        request_attributes("n1", &method, path)
            .into_iter()
            .map(|a| (a.verb, a.subresource))
            .collect()
    }

    #[test]
    fn each_path_asks_for_the_kubelets_subresources_in_order() {
        use http::Method;
        assert_eq!(
            subresources(Method::GET, "/stats/summary"),
            [("get", "stats")]
        );
        assert_eq!(subresources(Method::GET, "/metrics"), [("get", "metrics")]);
        assert_eq!(
            subresources(Method::GET, "/metrics/resource"),
            [("get", "metrics")]
        );
        assert_eq!(subresources(Method::GET, "/logs/"), [("get", "log")]);
        assert_eq!(
            subresources(Method::GET, "/pods"),
            [("get", "pods"), ("get", "proxy")]
        );
        assert_eq!(
            subresources(Method::GET, "/healthz/ping"),
            [("get", "healthz"), ("get", "proxy")]
        );
        assert_eq!(
            subresources(Method::GET, "/configz"),
            [("get", "configz"), ("get", "proxy")]
        );
        assert_eq!(subresources(Method::GET, "/flagz"), [("get", "configz")]);
        assert_eq!(
            subresources(Method::POST, "/exec/ns/p/c"),
            [("create", "proxy")]
        );
        assert_eq!(
            subresources(Method::GET, "/containerLogs/ns/p/c"),
            [("get", "proxy")]
        );
        assert_eq!(
            subresources(Method::PUT, "/run/ns/p/c"),
            [("update", "proxy")]
        );
        assert_eq!(
            subresources(Method::HEAD, "/healthz"),
            [("", "healthz"), ("", "proxy")]
        );
    }

    #[test]
    fn a_prefix_matches_whole_segments_only() {
        use http::Method;
        assert_eq!(subresources(Method::GET, "/podsx"), [("get", "proxy")]);
        assert_eq!(
            subresources(Method::GET, "/statsummary"),
            [("get", "proxy")]
        );
        assert_eq!(subresources(Method::GET, "/metricsx/a"), [("get", "proxy")]);
    }

    #[test]
    fn the_refusal_names_the_user_verb_and_every_subresource() {
        let user = User {
            name: "alice".to_string(),
            ..User::default()
        };
        let attrs = request_attributes("n1", &http::Method::GET, "/pods");
        assert_eq!(
            describe("Forbidden", &user, &attrs),
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])"
        );
    }
}

//! Why talking to the API server failed, and what to do about it.

use nodeplugins_api::retry::{Classify, RetryClass};
use std::path::PathBuf;
use tracing::Instrument;

/// Why the API server could not be reached or a write failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeApiError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path:?}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A file the kubeconfig names (certificate, key, token) could not be
    /// read.
    #[error("kubeconfig {kubeconfig:?}: {path:?}: {source}")]
    CredentialFile {
        /// The kubeconfig.
        kubeconfig: PathBuf,
        /// The file it names.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The node's client certificate could not be had (TLS bootstrap).
    #[error("client certificate: {0}")]
    ClientCertificate(#[source] crate::kube_api::ClientCertificateError),
    /// The pod's service account could not be used.
    #[error("in-cluster configuration: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    /// The client could not be built from the configuration.
    #[error("API client: {0}")]
    Client(#[source] kube::Error),
    /// A request failed.
    #[error("{what}: {source}")]
    Request {
        /// What was being done, such as "patch node node-1 status".
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A request got no answer in time.
    #[error("{what}: no answer within {timeout:?}")]
    Timeout {
        /// What was being done.
        what: String,
        /// The deadline.
        timeout: std::time::Duration,
    },
    /// A CSI driver's topology label has another value on the Node already.
    #[error(
        "topology value collision for CSI driver {driver}: label {key} is {existing:?} on node {node}, the driver reports {wanted:?}"
    )]
    TopologyCollision {
        /// The driver.
        driver: String,
        /// The Node.
        node: String,
        /// The label.
        key: String,
        /// The Node's value.
        existing: String,
        /// The driver's value.
        wanted: String,
    },
    /// The Node's CSI node id annotation is not a JSON map; it is left as
    /// it is rather than replaced.
    #[error("failed to parse node {node}'s {annotation:?} annotation value ({value:?}): {source}")]
    NodeIdAnnotation {
        /// The Node.
        node: String,
        /// The annotation.
        annotation: &'static str,
        /// Its value.
        value: String,
        /// Why it is not a map.
        #[source]
        source: serde_json::Error,
    },
    /// The Node does not exist.
    #[error("node {0} does not exist")]
    NoNode(String),
    /// The credentials are another node's: every write would be refused.
    #[error(
        "the API credentials are node {identity}'s ({user}), not node {node}'s: every write would be refused; use node {node}'s credentials, or --node-name {identity}"
    )]
    WrongNode {
        /// The node the agent writes for (`--node-name`).
        node: String,
        /// The node the credentials are for.
        identity: String,
        /// The user name the API server saw.
        user: String,
    },
    /// One of the publisher's tasks ended without finishing (it panicked):
    /// the publisher stops rather than go on with part of its writes.
    #[error("a Kubernetes API task ended without finishing: {0}")]
    TaskLost(String),
}

impl KubeApiError {
    /// Whether this is the API server saying the object is not there.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// Whether this is the API server refusing an outdated update.
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409)
    }

    /// The HTTP status the API server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Request {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }
}

/// The one classification the Kubernetes API writes ask of their errors.
impl Classify for KubeApiError {
    fn class(&self) -> RetryClass {
        match self {
            // The object is not there (the Node): retried when the watch
            // shows it.
            Self::NoNode(_) => RetryClass::WhenItExists,
            // A refusal repeating will not change (a label collision, an
            // annotation that is not ours to fix, another node's
            // credentials): slowly, minutes apart, in case someone fixes it.
            Self::TopologyCollision { .. }
            | Self::NodeIdAnnotation { .. }
            | Self::WrongNode { .. } => RetryClass::Slowly,
            _ => match self.status() {
                Some(401) => RetryClass::Credentials,
                Some(404) => RetryClass::WhenItExists,
                Some(409) => RetryClass::Conflict,
                Some(429) => RetryClass::Backoff,
                Some(code) if (400..500).contains(&code) => RetryClass::Slowly,
                _ => RetryClass::Backoff,
            },
        }
    }

    /// How long the API server asked to wait before trying again (the
    /// `retryAfterSeconds` of a 429, or of a 5xx), if it said.
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Request {
                source: kube::Error::Api(status),
                ..
            } => status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|seconds| *seconds > 0)
                .map(|seconds| std::time::Duration::from_secs(seconds.into())),
            _ => None,
        }
    }
}

/// Runs one request in a span naming it, naming it in the error too; a
/// deadline that passed in the client ([`crate::kube_api::client::deadline`]) is a
/// [`KubeApiError::Timeout`].
pub(crate) async fn request<T>(
    what: impl FnOnce() -> String,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, KubeApiError> {
    let what = what();
    let span = tracing::info_span!("api_request", request = %what);
    call.instrument(span)
        .await
        .map_err(|source| KubeApiError::from_request(what, source))
}

impl KubeApiError {
    /// The error of request `what` that failed with `source`.
    pub(crate) fn from_request(what: String, source: kube::Error) -> Self {
        match crate::kube_api::client::deadline::passed_deadline(&source) {
            Some(timeout) => Self::Timeout { what, timeout },
            None => Self::Request { what, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16) -> KubeApiError {
        let status = kube::core::Status {
            code,
            ..Default::default()
        };
        KubeApiError::Request {
            what: "patch node n status".into(),
            source: kube::Error::Api(Box::new(status)),
        }
    }

    #[test]
    fn each_failure_is_retried_as_its_cause_calls_for() {
        assert_eq!(answered(401).class(), RetryClass::Credentials);
        assert_eq!(answered(404).class(), RetryClass::WhenItExists);
        assert_eq!(answered(409).class(), RetryClass::Conflict);
        assert_eq!(answered(429).class(), RetryClass::Backoff);
        for code in [400, 403, 422] {
            assert_eq!(answered(code).class(), RetryClass::Slowly, "{code}");
        }
        for code in [500, 503, 504] {
            assert_eq!(answered(code).class(), RetryClass::Backoff, "{code}");
        }
        let timeout = KubeApiError::Timeout {
            what: "x".into(),
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(timeout.class(), RetryClass::Backoff);
        assert_eq!(
            KubeApiError::NoNode("n".into()).class(),
            RetryClass::WhenItExists
        );
    }
}

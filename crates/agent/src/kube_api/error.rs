//! Why talking to the API server failed.

use std::path::PathBuf;

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
    /// The Node does not exist.
    #[error("node {0} does not exist")]
    NoNode(String),
}

impl KubeApiError {
    /// Whether this is the API server saying the object is not there.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Request { source: kube::Error::Api(status), .. } if status.is_not_found())
    }

    /// Whether this is the API server refusing an outdated update.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Request { source: kube::Error::Api(status), .. } if status.is_conflict())
    }
}

/// Runs one request with a deadline, naming it in the error.
pub(crate) async fn request<T>(
    what: impl FnOnce() -> String,
    timeout: std::time::Duration,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, KubeApiError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(KubeApiError::Request {
            what: what(),
            source,
        }),
        Err(_) => Err(KubeApiError::Timeout {
            what: what(),
            timeout,
        }),
    }
}

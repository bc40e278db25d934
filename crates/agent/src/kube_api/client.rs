//! Building the API client from a kubeconfig or the pod's service account.

use super::config::KubeConfigSource;
use super::error::KubeApiError;

/// A client for `source` and the server it talks to. Reads the
/// configuration only: nothing is sent until the first write.
pub(super) async fn connect(
    source: &KubeConfigSource,
) -> Result<(kube::Client, String), KubeApiError> {
    let config = match source {
        KubeConfigSource::Kubeconfig(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                KubeApiError::Kubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|source| KubeApiError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        KubeConfigSource::InCluster => {
            kube::Config::incluster().map_err(KubeApiError::InCluster)?
        }
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(KubeApiError::Client)?;
    Ok((client, server))
}

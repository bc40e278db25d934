//! The API server a run reads claims and ResourceSlices from
//! (`--kubeconfig`, with the `kube` feature).

use std::path::Path;

/// A client of the API server `kubeconfig` names.
pub(crate) async fn connect(kubeconfig: &Path) -> Result<kube::Client, String> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    kube::Client::try_from(config).map_err(|e| format!("API client: {e}"))
}

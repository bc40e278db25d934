//! Pod-level DRA through the admin socket: `dra prepare --pod` reads the
//! pod and its claims from the API (all of it before any driver is called),
//! then the DRA manager prepares them; `dra unprepare --pod` finds what the
//! pod uses in the prepared claims' records, so it works after the pod is
//! gone from the API, after an agent restart, and without an API server.

use super::status_sources::StatusSources;
use crate::dra::{DraError, PreparedPod, UnpreparedPod};

/// Why a pod could not be prepared or unprepared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodDraError {
    /// The agent has no API server to read the pod from.
    #[error(
        "preparing a pod reads it and its claims from the Kubernetes API: run the agent with --kubeconfig, or name the driver and claims"
    )]
    NoApi,
    /// The pod or its claims could not be read, or may not be prepared.
    #[cfg(feature = "kube")]
    #[error(transparent)]
    Read(#[from] crate::kube_api::PodClaimsError),
    /// The DRA manager refused.
    #[error(transparent)]
    Dra(#[from] DraError),
}

/// Prepares pod `namespace/name`.
pub(crate) async fn prepare(
    sources: &StatusSources,
    namespace: &str,
    name: &str,
) -> Result<PreparedPod, PodDraError> {
    #[cfg(feature = "kube")]
    if let Some(reader) = &sources.pod_claims {
        let claims = reader.read(namespace, name).await?;
        return Ok(sources.dra.prepare_pod(&claims).await?);
    }
    let _ = (sources, namespace, name);
    Err(PodDraError::NoApi)
}

/// Unprepares pod `namespace/name`: the pod of that name in the API if it
/// is there, else the one the records name so.
pub(crate) async fn unprepare(
    sources: &StatusSources,
    namespace: &str,
    name: &str,
) -> Result<UnpreparedPod, PodDraError> {
    #[allow(unused_mut)]
    let mut uid: Option<String> = None;
    #[cfg(feature = "kube")]
    if let Some(reader) = &sources.pod_claims {
        match reader.pod_uid(namespace, name).await {
            Ok(found) => uid = found,
            // The records are enough to unprepare: the API being away must
            // not keep a pod's devices.
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e,
                    "pod not read from the API; unpreparing what the records name")
            }
        }
    }
    Ok(sources
        .dra
        .unprepare_pod(namespace, name, uid.as_deref())
        .await?)
}

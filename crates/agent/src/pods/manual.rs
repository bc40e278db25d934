//! Unpreparing a pod's claims by hand, by its name (`dra unprepare --pod`):
//! from the records alone, so that it works after the pod is gone from the
//! API, with the API away, and without one.

use super::pod::UnpreparedPod;
use crate::dra::{DraError, DraHandle};

/// Unprepares what pod `namespace/name` uses, as recorded: the pod of UID
/// `live` (the API's pod of that name, when it was read), and every other
/// pod of that name the records still name (a pod made again under the
/// same name has a new UID; the old one's claims are given back too).
pub(crate) async fn unprepare_by_name(
    dra: &DraHandle,
    namespace: &str,
    name: &str,
    live: Option<String>,
) -> Result<UnpreparedPod, DraError> {
    let recorded = dra
        .recorded_pod_uids(namespace, name)
        .await
        .map_err(|_| DraError::Stopping)?;
    let mut uids: Vec<String> = live.iter().cloned().collect();
    uids.extend(
        recorded
            .into_iter()
            .filter(|uid| Some(uid) != live.as_ref()),
    );
    let mut claims = Vec::new();
    for uid in &uids {
        claims.extend(dra.unprepare_pod(uid).await?);
    }
    Ok(UnpreparedPod {
        pod_uid: live.or_else(|| uids.first().cloned()),
        claims,
    })
}

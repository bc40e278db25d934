//! Answering one request line of the admin socket (other than status and
//! events, which the server streams): each asks the part of the agent that
//! owns what it is about. While the node's pods are served from the API,
//! devices and claims follow the pods, so allocating, releasing, preparing
//! and unpreparing by hand are refused: the pods owner's reconcile would
//! give back what they made.

use serde_json::Value;

use super::parts::AdminParts;
use super::protocol::{
    AdminErrorReply, AdminRequest, AllocateReply, DraClaimsReply, DraPrepareReply,
    DraUnprepareReply, PodsReply, ReleaseReply,
};

/// Why a request by hand is refused while pods are served.
const SERVED: &str = "the agent serves the node's pods from the API: devices and claims follow the pods; run it with --pods off to allocate, release, prepare and unprepare by hand";
/// Why a pod cannot be prepared without an API server.
const NO_API: &str = "preparing a pod reads it and its claims from the Kubernetes API: run the agent with --kubeconfig, or name the driver and claims";

/// The answer to `request`.
pub(super) async fn answer(parts: &AdminParts, request: AdminRequest) -> Value {
    let by_hand = matches!(
        request,
        AdminRequest::Allocate(_)
            | AdminRequest::Release { .. }
            | AdminRequest::DraPrepare { .. }
            | AdminRequest::DraUnprepare { .. }
            | AdminRequest::DraPreparePod { .. }
            | AdminRequest::DraUnpreparePod { .. }
    );
    if by_hand && parts.serving_pods() {
        return error_reply(SERVED);
    }
    match request {
        AdminRequest::Allocate(request) => reply(
            parts
                .devices
                .allocate(&request)
                .await
                .map(|allocations| AllocateReply { allocations }),
        ),
        AdminRequest::Release { pod } => reply(
            parts
                .devices
                .release(&pod)
                .await
                .map(|released| ReleaseReply { released }),
        ),
        AdminRequest::DraPrepare {
            driver,
            claims,
            pod,
        } => {
            let dra = &parts.dra;
            let prepared = match &pod {
                Some(pod) => dra.prepare_for_pod(&driver, &claims, pod).await,
                None => dra.prepare(&driver, &claims).await,
            };
            reply(prepared.map(|claims| DraPrepareReply { claims }))
        }
        AdminRequest::DraUnprepare { driver, claims } => {
            let dra = &parts.dra;
            let result = match driver {
                Some(driver) => dra.unprepare(&driver, &claims).await,
                None => Ok(dra.unprepare_recorded(&claims).await),
            };
            reply(result.map(|claims| DraUnprepareReply { claims }))
        }
        AdminRequest::DraClaims => {
            let dra = &parts.dra;
            let checkpoint_error = dra
                .checkpoint_problem()
                .await
                .ok()
                .flatten()
                .map(|p| p.to_string());
            reply(Ok::<_, std::convert::Infallible>(DraClaimsReply {
                claims: dra.prepared_claims(),
                checkpoint_error,
            }))
        }
        AdminRequest::DraPreparePod { namespace, name } => {
            prepare_pod(parts, &namespace, &name).await
        }
        AdminRequest::DraUnpreparePod { namespace, name } => {
            unprepare_pod(parts, &namespace, &name).await
        }
        AdminRequest::Pods { namespace, name } => pods(parts, namespace, name).await,
        AdminRequest::Status | AdminRequest::Events { .. } => error_reply("answered by the server"),
    }
}

/// Pod `namespace/name`'s claims prepared by hand.
async fn prepare_pod(parts: &AdminParts, namespace: &str, name: &str) -> Value {
    #[cfg(feature = "kube")]
    if let Some(pods) = &parts.pods {
        return reply(pods.prepare_pod(namespace, name).await);
    }
    let _ = (parts, namespace, name);
    error_reply(NO_API)
}

/// What pod `namespace/name` uses unprepared by hand: the pod the API has
/// under that name if it can be read, and every pod of that name the
/// records name.
async fn unprepare_pod(parts: &AdminParts, namespace: &str, name: &str) -> Value {
    #[cfg(feature = "kube")]
    if let Some(pods) = &parts.pods {
        return reply(pods.unprepare_pod(namespace, name).await);
    }
    reply(crate::pods::unprepare_by_name(&parts.dra, namespace, name, None).await)
}

/// The pods bound to the node, of `namespace` and `name` when given.
async fn pods(parts: &AdminParts, namespace: Option<String>, name: Option<String>) -> Value {
    #[cfg(feature = "kube")]
    if let Some(handle) = &parts.pods {
        let snapshot = match handle.running_snapshot().await {
            Ok(snapshot) => snapshot,
            Err(e) => return error_reply(e),
        };
        let pods = snapshot
            .pods()
            .into_iter()
            .filter(|p| namespace.as_ref().is_none_or(|ns| *ns == p.pod.namespace))
            .filter(|p| name.as_ref().is_none_or(|n| *n == p.pod.name))
            .map(|p| crate::pods::PodStatus::clone(&p))
            .collect();
        return reply(Ok::<_, std::convert::Infallible>(PodsReply {
            serving: handle.serving(),
            listed: snapshot.listed(),
            pods,
        }));
    }
    let _ = (parts, namespace, name);
    reply(Ok::<_, std::convert::Infallible>(PodsReply {
        serving: false,
        listed: false,
        pods: Vec::new(),
    }))
}

/// `result` as a reply line: the answer, or `{"error": ...}`.
fn reply<T: serde::Serialize, E: std::fmt::Display>(result: Result<T, E>) -> Value {
    match result {
        Ok(answer) => serde_json::to_value(answer).unwrap_or_else(error_reply),
        Err(e) => error_reply(e),
    }
}

/// An error line.
pub(super) fn error_reply(error: impl std::fmt::Display) -> Value {
    serde_json::to_value(AdminErrorReply {
        error: error.to_string(),
    })
    .unwrap_or_default()
}

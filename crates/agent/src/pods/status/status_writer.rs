//! What the node writes to the pods it runs, with its own credentials, as
//! the kubelet's status manager writes it: a pod's status (a strategic
//! merge patch of `pods/status` naming the pod's UID, so that a pod made
//! again under the same name is never written over), and, once a deleted
//! pod's containers stopped and what it held was given back, the pod's
//! deletion with no grace period (UID precondition), which ends a graceful
//! deletion. The node's identity may do both for the pods bound to it (the
//! Node authorizer and NodeRestriction).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::common::token_bucket::TokenBucket;
use crate::kube_api::{Connection, KubeApiError, request};
use crate::pods::pod::PodRef;

/// Writes pods' statuses and ends their deletions. Cheap to clone.
#[derive(Clone)]
pub(crate) struct StatusWriter {
    connection: watch::Receiver<Connection>,
    /// The kubelet's client pace, shared with the pods' other reads.
    limiter: Arc<TokenBucket>,
}

impl StatusWriter {
    /// Writes through `connection` (whose deadline bounds each request),
    /// paced by `limiter`.
    pub(crate) fn new(connection: watch::Receiver<Connection>, limiter: Arc<TokenBucket>) -> Self {
        Self {
            connection,
            limiter,
        }
    }

    fn api(&self, pod: &PodRef) -> Api<Pod> {
        let client = self.connection.borrow().client.clone();
        Api::namespaced(client, &pod.namespace)
    }

    /// Writes `status` as pod `pod`'s status, if the pod is still at
    /// `resource_version` (what the status was made from): a pod another
    /// writer changed meanwhile (ended it, say) is never written over with
    /// an older view (409: the caller looks again). Returns the pod's
    /// version after the write.
    pub(crate) async fn patch_status(
        &self,
        pod: &PodRef,
        resource_version: Option<&str>,
        status: &Value,
    ) -> Result<Option<String>, KubeApiError> {
        let mut metadata = json!({"uid": pod.uid});
        if let Some(version) = resource_version {
            metadata["resourceVersion"] = json!(version);
        }
        let patch = json!({"metadata": metadata, "status": status});
        let api = self.api(pod);
        self.limiter.acquire().await;
        let params = PatchParams::default();
        let patch = Patch::Strategic(&patch);
        let call = api.patch_status(&pod.name, &params, &patch);
        request(|| format!("patch pod {} status", pod), call)
            .await
            .map(|written| written.metadata.resource_version)
    }

    /// Deletes pod `pod` with no grace period, if it is still this pod.
    pub(crate) async fn delete(&self, pod: &PodRef) -> Result<(), KubeApiError> {
        let api = self.api(pod);
        self.limiter.acquire().await;
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let call = api.delete(&pod.name, &params);
        match request(|| format!("delete pod {}", pod), call).await {
            // Gone, or another pod now has its name (the UID precondition):
            // nothing to delete any more.
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

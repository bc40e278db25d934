//! Kubernetes Events on pods, as the kubelet records them when it cannot
//! admit or start a pod: a `Warning` with the kubelet's reason
//! (`UnexpectedAdmissionError`, `FailedPrepareDynamicResources`) and
//! message, on the pod (`involvedObject`), from this node. A node identity
//! may create Events (the Node authorizer's node rules).
//!
//! One Event per change of reason and message per pod: a failure repeated
//! by every retry is not sent again (the kubelet's recorder folds repeats
//! into a count; here they cost no request at all).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::watch;

use super::pod::PodRef;
use crate::common::token_bucket::TokenBucket;
use crate::kube_api::{Connection, KUBE_API_BURST, KUBE_API_QPS};

/// The kubelet's reason when a pod's devices cannot be allocated.
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// The kubelet's reason when a pod's claims cannot be prepared.
pub const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";
/// The kubelet's reason when a pod's sandbox cannot be made.
pub(crate) const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
/// The component named as the Events' source.
const COMPONENT: &str = "nodeplugins";
/// Longer messages are cut (the API refuses Events over 1 MiB; the kubelet
/// cuts health messages at 1024 characters too).
const MAX_MESSAGE: usize = 1024;

/// Writes Events on pods with the agent's current client.
#[derive(Clone)]
pub(crate) struct PodEvents {
    connection: watch::Receiver<Connection>,
    node: String,
    /// Paces the writes: the kubelet records Events through a client of
    /// their own, limited apart from its other requests (`eventRecordQPS`
    /// 50, `eventBurst` 100).
    limiter: Arc<TokenBucket>,
    /// The container Events recorded lately, by what they say: a repeat
    /// counts on the first.
    similar: Arc<Mutex<HashMap<String, Similar>>>,
}

/// An Event recorded lately.
struct Similar {
    name: String,
    count: i32,
    last: tokio::time::Instant,
}

/// How long an Event is counted on rather than made again (client-go's
/// correlator's ten minutes).
const SIMILAR_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);
/// The most Events remembered for counting.
const MAX_SIMILAR: usize = 4096;

impl PodEvents {
    /// Events from node `node` (the client's deadline bounds each write).
    pub(crate) fn new(connection: watch::Receiver<Connection>, node: String) -> Self {
        Self {
            connection,
            node,
            limiter: Arc::new(TokenBucket::new(KUBE_API_QPS, KUBE_API_BURST)),
            similar: Arc::default(),
        }
    }

    /// Records a `Warning` with `reason` and `message` on `pod`. A failure
    /// is logged: an Event is worth one try.
    pub(crate) async fn warning(&self, pod: &PodRef, reason: &str, message: &str) {
        let involved = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectReference::default()
        };
        let event = self.event(&pod.namespace, involved, "Warning", reason, message);
        if let Err(e) = self.record(&pod.namespace, &event).await {
            tracing::warn!(pod = %pod, %reason, error = %e, "cannot record an Event on the pod");
        }
    }

    /// Records an Event of `kind` (`Normal`, `Warning`) with `reason` and
    /// `message` on the container of `pod` at `field_path`
    /// (`spec.containers{app}`), as
    /// the kubelet records a probe's failure or a container's kill. The
    /// same Event again within ten minutes counts on the first one (its
    /// `count` and `lastTimestamp` patched), as client-go's correlator
    /// folds repeats. A failure is logged.
    pub(crate) async fn on_container(
        &self,
        pod: &PodRef,
        field_path: &str,
        kind: &str,
        reason: &str,
        message: &str,
    ) {
        let involved = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            field_path: Some(field_path.to_string()),
            ..ObjectReference::default()
        };
        let key = format!("{}\n{field_path}\n{kind}\n{reason}\n{message}", pod.uid);
        let now = tokio::time::Instant::now();
        let repeat = {
            let mut similar = self.similar.lock().unwrap_or_else(PoisonError::into_inner);
            similar.retain(|_, s| now.duration_since(s.last) < SIMILAR_WINDOW);
            if similar.len() >= MAX_SIMILAR {
                similar.clear();
            }
            match similar.get_mut(&key) {
                Some(seen) => {
                    seen.count += 1;
                    seen.last = now;
                    Some((seen.name.clone(), seen.count))
                }
                None => None,
            }
        };
        let result = match repeat {
            Some((name, count)) => self.count_again(&pod.namespace, &name, count).await,
            None => {
                let event = self.event(&pod.namespace, involved, kind, reason, message);
                let name = event.metadata.name.clone().unwrap_or_default();
                let created = self.record(&pod.namespace, &event).await;
                if created.is_ok() {
                    let mut similar = self.similar.lock().unwrap_or_else(PoisonError::into_inner);
                    similar.insert(
                        key,
                        Similar {
                            name,
                            count: 1,
                            last: now,
                        },
                    );
                }
                created
            }
        };
        if let Err(e) = result {
            tracing::warn!(pod = %pod, container = %field_path, %reason, error = %e, "cannot record an Event on the container");
        }
    }

    /// Patches Event `name` to say it happened `count` times, now.
    async fn count_again(
        &self,
        namespace: &str,
        name: &str,
        count: i32,
    ) -> Result<(), kube::Error> {
        let client = self.connection.borrow().client.clone();
        let events: Api<Event> = Api::namespaced(client, namespace);
        let patch = serde_json::json!({
            "count": count,
            "lastTimestamp": Time(Timestamp::now()),
        });
        self.limiter.acquire().await;
        events
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }

    /// Records an Event of `kind` (`Normal`, `Warning`) with `reason` and
    /// `message` on the node's Node, as the kubelet's node events are (in
    /// `default`, the Node named by kind and name).
    pub(crate) async fn on_node(&self, kind: &str, reason: &str, message: &str) {
        let involved = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.node.clone()),
            ..ObjectReference::default()
        };
        let event = self.event("default", involved, kind, reason, message);
        if let Err(e) = self.record("default", &event).await {
            tracing::warn!(%reason, error = %e, "cannot record an Event on the Node");
        }
    }

    /// Creates `event` in `namespace`, paced.
    async fn record(&self, namespace: &str, event: &Event) -> Result<(), kube::Error> {
        let client = self.connection.borrow().client.clone();
        let events: Api<Event> = Api::namespaced(client, namespace);
        self.limiter.acquire().await;
        events.create(&PostParams::default(), event).await.map(drop)
    }

    /// An Event of `kind` on `involved`, in `namespace`, from this node.
    fn event(
        &self,
        namespace: &str,
        involved: ObjectReference,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Event {
        let now = Timestamp::now();
        let mut message = message.to_string();
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let object = involved.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                // As client-go names them: the object's name and the time.
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            involved_object: involved,
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some(kind.into()),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: Some(self.node.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(self.node.clone()),
            ..Event::default()
        }
    }
}

//! The pods' podCertificate projections, as the kubelet's pod certificate
//! manager serves them: for each projection of each pod (by namespace,
//! pod, UID, volume and the source's index), a key made on the node and a
//! PodCertificateRequest (`certificates.k8s.io/v1`) for it, which the
//! projection's signer answers with a certificate chain; the key and the
//! chain are the projection's files from then on.
//!
//! Each projection goes through the kubelet's states: none asked for yet
//! (a PodCertificateRequest is made: `generateName: req-` in the pod's
//! namespace, owned by the pod, with the pod's, its service account's and
//! the node's names and UIDs, the source's signer, `maxExpirationSeconds`
//! as given, its `userAnnotations` as `unverifiedUserAnnotations`, and a
//! stub PKCS#10 request signed by the new key), waiting for it, issued
//! (fresh until the request's `beginRefreshAt` plus up to five minutes at
//! random, then a new key and request while the issued one is still
//! served), denied or failed (for good: the pod's files cannot be made
//! and it says why). A request the node's watch does not show ten minutes
//! (plus up to five at random) after it was made is taken as deleted and
//! made again. The requests are read from one watch of those naming the
//! node (`spec.nodeName`, which the Node authorizer lets a node list and
//! watch), started with the first projection; nothing is kept across
//! restarts, so a restarted node asks for every pod's certificates again.
//!
//! The volume's set-up drives a projection: each set-up (the first, its
//! retries on the operation backoff, the resyncs) takes one step and
//! reads the files, as the kubelet's manager steps each projection as its
//! pods and requests change and each minute or two, and its volume's
//! set-up reads what it holds. A set-up that waits for a first
//! certificate waits up to a second for the watch to show it answered, so
//! that a signer that answers at once gets the pod started at once. The Events the kubelet records on the pod
//! are kept for the pod's worker: `Denied` and `Failed` (with the
//! kubelet's own message, which puts the condition's reason where Go's
//! `Eventf` takes a format), `CertificateOverdueForRefresh` ten minutes
//! after the refresh began, `CertificateExpired` past `notAfter`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine;
use k8s_openapi::api::core::v1::{Node, Pod, PodCertificateProjection, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use rand::Rng;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::common::certificate_key;
use crate::common::go_quote::go_quote;
use crate::common::pem::{pem, pem_blocks};
use crate::kube_api::Connection;
use crate::metrics::MetricsSource;
use crate::volumes::content::certificates_v1::{
    PodCertificateRequest, RequestCondition, RequestSpec,
};
use crate::volumes::content::objects::spawn_watch;
use crate::volumes::error::Warning;

/// After this long (plus up to `JITTER`) a request the watch does not show
/// is taken as deleted.
const ASSUME_DELETED: Duration = Duration::from_secs(600);
/// A refresh not done this long after it began is overdue.
const REFRESH_OVERDUE: Duration = Duration::from_secs(600);
/// Spreads the projections' requests over time.
const JITTER: Duration = Duration::from_secs(300);
/// How long a set-up waits for a request it made to be answered.
const FIRST_ANSWER: Duration = Duration::from_secs(1);

/// The Event reasons the kubelet records about a pod's certificates.
pub(crate) const DENIED: &str = "Denied";
/// ...
pub(crate) const FAILED: &str = "Failed";
/// ...
pub(crate) const OVERDUE_FOR_REFRESH: &str = "CertificateOverdueForRefresh";
/// ...
pub(crate) const EXPIRED: &str = "CertificateExpired";

/// Why a projection has no files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PodCertificateError {
    /// Not asked for yet, or its request not answered yet.
    #[error("credential bundle is not issued yet")]
    NotIssued,
    /// Its signer denied it, for good.
    #[error(
        "PodCertificateRequest was permanently denied: reason={} message={}",
        go_quote(reason),
        go_quote(message)
    )]
    Denied { reason: String, message: String },
    /// Its signer failed it, for good.
    #[error(
        "PodCertificateRequest was permanently failed: reason={} message={}",
        go_quote(reason),
        go_quote(message)
    )]
    Failed { reason: String, message: String },
}

/// One projection of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProjectionKey {
    namespace: String,
    pod_name: String,
    pod_uid: String,
    volume: String,
    source_index: usize,
}

/// A certificate issued and served.
#[derive(Debug, Clone)]
struct Issued {
    key: Vec<u8>,
    chain: Vec<u8>,
    begin_refresh_at: SystemTime,
    not_after: SystemTime,
    overdue_said: bool,
    expired_said: bool,
}

/// A request made and not answered yet.
#[derive(Debug, Clone)]
struct Asked {
    key: Vec<u8>,
    name: String,
    abandon_at: SystemTime,
}

/// Where a projection stands.
#[derive(Debug, Clone)]
enum State {
    Initial,
    Wait(Asked),
    Fresh(Issued),
    WaitRefresh(Issued, Asked),
    Denied { reason: String, message: String },
    Failed { reason: String, message: String },
}

impl State {
    /// The key and the chain, or why there are none.
    fn bundle(&self) -> Result<(Vec<u8>, Vec<u8>), PodCertificateError> {
        match self {
            Self::Initial | Self::Wait(_) => Err(PodCertificateError::NotIssued),
            Self::Fresh(issued) | Self::WaitRefresh(issued, _) => {
                Ok((issued.key.clone(), issued.chain.clone()))
            }
            Self::Denied { reason, message } => Err(PodCertificateError::Denied {
                reason: reason.clone(),
                message: message.clone(),
            }),
            Self::Failed { reason, message } => Err(PodCertificateError::Failed {
                reason: reason.clone(),
                message: message.clone(),
            }),
        }
    }

    /// The metric's name of the state at `now`.
    fn metric_state(&self, now: SystemTime) -> &'static str {
        match self {
            Self::Initial | Self::Wait(_) => "not_yet_issued",
            Self::Denied { .. } => "denied",
            Self::Failed { .. } => "failed",
            Self::Fresh(issued) | Self::WaitRefresh(issued, _) => {
                if now > issued.not_after {
                    "expired"
                } else if now > issued.begin_refresh_at + REFRESH_OVERDUE {
                    "overdue_for_refresh"
                } else {
                    "fresh"
                }
            }
        }
    }
}

/// The answer a request has, by its first terminal condition.
enum Answer {
    Pending,
    Denied(RequestCondition),
    Failed(RequestCondition),
    Issued(Issued),
}

/// The pods' certificates, shared by every pod's volumes.
pub(crate) struct PodCertificates {
    connection: watch::Receiver<Connection>,
    node_name: String,
    watch: Mutex<Option<(Store<PodCertificateRequest>, CancellationToken)>>,
    records: Mutex<HashMap<ProjectionKey, Arc<tokio::sync::Mutex<Record>>>>,
    warnings: Mutex<HashMap<String, Vec<Warning>>>,
    /// Told of each request the watch shows changed.
    changed: Arc<tokio::sync::Notify>,
}

/// A projection's state and the signer it names (for the metric).
struct Record {
    state: State,
    signer: String,
}

impl PodCertificates {
    /// The certificates of node `node_name`'s pods, asked for through
    /// `connection`'s client.
    pub(crate) fn new(connection: watch::Receiver<Connection>, node_name: String) -> Self {
        Self {
            connection,
            node_name,
            watch: Mutex::new(None),
            records: Mutex::new(HashMap::new()),
            warnings: Mutex::new(HashMap::new()),
            changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The key (PEM) and certificate chain of source `source_index` of
    /// `pod`'s volume `volume`, after one step of its state (on node
    /// `node`, whose UID a new request names).
    pub(crate) async fn credential_bundle(
        &self,
        pod: &Pod,
        volume: &str,
        source_index: usize,
        source: &PodCertificateProjection,
        node: Option<&Node>,
    ) -> Result<(Vec<u8>, Vec<u8>), PodCertificateError> {
        let key = ProjectionKey {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            volume: volume.to_string(),
            source_index,
        };
        let record = {
            let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
            records
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(tokio::sync::Mutex::new(Record {
                        state: State::Initial,
                        signer: source.signer_name.clone(),
                    }))
                })
                .clone()
        };
        let mut record = record.lock().await;
        let deadline = tokio::time::Instant::now() + FIRST_ANSWER;
        loop {
            // Asked for before it is looked for: a change in between is not
            // missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Err(error) = self.step(&mut record.state, &key, pod, source, node).await {
                tracing::warn!(
                    namespace = %key.namespace,
                    pod = %key.pod_name,
                    volume = %key.volume,
                    source_index,
                    %error,
                    "while handling podCertificate projected volume source"
                );
            }
            // A first request is waited for a moment: a signer that answers
            // at once gets the pod its files at this set-up, not the next.
            if !matches!(record.state, State::Wait(_))
                || tokio::time::timeout_at(deadline, changed).await.is_err()
            {
                break;
            }
        }
        record.state.bundle()
    }

    /// Forgets pod `uid`'s projections.
    pub(crate) fn forget_pod(&self, uid: &str) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| key.pod_uid != uid);
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }

    /// What is to be said on pod `uid` since last asked.
    pub(crate) fn take_warnings(&self, uid: &str) -> Vec<Warning> {
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid)
            .unwrap_or_default()
    }

    /// How many projections are in each state, by signer
    /// (`kubelet_podcertificate_states`).
    pub(crate) fn states(&self) -> BTreeMap<(String, &'static str), i64> {
        let records: Vec<_> = self
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let now = SystemTime::now();
        let mut counts = BTreeMap::new();
        for record in records {
            // A record being stepped is counted at the next scrape.
            if let Ok(record) = record.try_lock() {
                *counts
                    .entry((record.signer.clone(), record.state.metric_state(now)))
                    .or_insert(0) += 1;
            }
        }
        counts
    }

    /// One step of a projection's state, as the kubelet's
    /// `handleProjection`: an error is logged, and the state is what it
    /// became.
    async fn step(
        &self,
        state: &mut State,
        key: &ProjectionKey,
        pod: &Pod,
        source: &PodCertificateProjection,
        node: Option<&Node>,
    ) -> Result<(), String> {
        let now = SystemTime::now();
        match state {
            State::Initial => {
                let asked = self
                    .ask(pod, source, node)
                    .await
                    .map_err(|e| format!("while creating initial PodCertificateRequest: {e}"))?;
                *state = State::Wait(asked);
                Ok(())
            }
            State::Wait(asked) => match self.answer(key, &asked.name, &asked.key)? {
                None if now > asked.abandon_at => {
                    let name = asked.name.clone();
                    *state = State::Initial;
                    Err(format!(
                        "PodCertificateRequest \"{}/{name}\" appears to have been deleted",
                        key.namespace
                    ))
                }
                None | Some(Answer::Pending) => Ok(()),
                Some(answer) => {
                    let name = asked.name.clone();
                    *state = self.answered(key, &name, answer, state.clone());
                    Ok(())
                }
            },
            State::Fresh(issued) => {
                if now < issued.begin_refresh_at {
                    return Ok(());
                }
                self.say_due(key, issued, now);
                let asked = self
                    .ask(pod, source, node)
                    .await
                    .map_err(|e| format!("while creating refresh PodCertificateRequest: {e}"))?;
                *state = State::WaitRefresh(issued.clone(), asked);
                Ok(())
            }
            State::WaitRefresh(issued, asked) => {
                match self.answer(key, &asked.name, &asked.key)? {
                    None if now > asked.abandon_at => {
                        *state = State::Fresh(issued.clone());
                        Err("PodCertificateRequest appears to have been deleted".into())
                    }
                    None | Some(Answer::Pending) => {
                        self.say_due(key, issued, now);
                        Ok(())
                    }
                    Some(answer) => {
                        let name = asked.name.clone();
                        *state = self.answered(key, &name, answer, state.clone());
                        Ok(())
                    }
                }
            }
            State::Denied { .. } | State::Failed { .. } => Ok(()),
        }
    }

    /// The state a terminal `answer` to request `name` leads to, with the
    /// kubelet's Event for a denial or failure.
    fn answered(&self, key: &ProjectionKey, name: &str, answer: Answer, state: State) -> State {
        let said = |condition: &RequestCondition, verb: &str| {
            // The kubelet passes the condition's reason as Eventf's format
            // and its sentence as the one argument; a reason has no verbs
            // (the API allows none), so Go appends the argument as extra.
            format!(
                "{}%!(EXTRA string=PodCertificateRequest {}/{name} {verb}, reason={}, message={})",
                condition.reason,
                key.namespace,
                go_quote(&condition.reason),
                go_quote(&condition.message)
            )
        };
        match answer {
            Answer::Pending => state,
            Answer::Denied(condition) => {
                self.warn(&key.pod_uid, DENIED, said(&condition, "was denied"));
                State::Denied {
                    reason: condition.reason,
                    message: condition.message,
                }
            }
            Answer::Failed(condition) => {
                self.warn(&key.pod_uid, FAILED, said(&condition, "failed"));
                State::Failed {
                    reason: condition.reason,
                    message: condition.message,
                }
            }
            Answer::Issued(issued) => State::Fresh(issued),
        }
    }

    /// The Events of a certificate due for refresh: overdue ten minutes
    /// after its refresh began, expired past its `notAfter`; each once.
    fn say_due(&self, key: &ProjectionKey, issued: &mut Issued, now: SystemTime) {
        if now > issued.begin_refresh_at + REFRESH_OVERDUE && !issued.overdue_said {
            self.warn(
                &key.pod_uid,
                OVERDUE_FOR_REFRESH,
                "PodCertificate refresh overdue".into(),
            );
            issued.overdue_said = true;
        }
        if now > issued.not_after && !issued.expired_said {
            self.warn(&key.pod_uid, EXPIRED, "PodCertificate expired".into());
            issued.expired_said = true;
        }
    }

    fn warn(&self, uid: &str, reason: &'static str, message: String) {
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(uid.to_string())
            .or_default()
            .push(Warning { reason, message });
    }

    /// Request `name`'s answer as the node's watch shows it (`None`: not
    /// there), the issued certificate served with `key`.
    fn answer(
        &self,
        key: &ProjectionKey,
        name: &str,
        private_key: &[u8],
    ) -> Result<Option<Answer>, String> {
        let store = self.store();
        let Some(request) = store.get(&ObjectRef::new(name).within(&key.namespace)) else {
            return Ok(None);
        };
        let status = request.status.clone().unwrap_or_default();
        for condition in status.conditions {
            match condition.type_.as_str() {
                "Denied" => return Ok(Some(Answer::Denied(condition))),
                "Failed" => return Ok(Some(Answer::Failed(condition))),
                "Issued" => {
                    let chain: Vec<u8> =
                        pem_blocks(status.certificate_chain.as_deref().unwrap_or_default())
                            .iter()
                            .flat_map(|der| pem("CERTIFICATE", der))
                            .collect();
                    let begin_refresh_at = status
                        .begin_refresh_at
                        .map(SystemTime::from)
                        .ok_or_else(|| {
                            format!(
                                "PodCertificateRequest {name:?} is issued with no beginRefreshAt"
                            )
                        })?;
                    let not_after = status.not_after.map(SystemTime::from).ok_or_else(|| {
                        format!("PodCertificateRequest {name:?} is issued with no notAfter")
                    })?;
                    return Ok(Some(Answer::Issued(Issued {
                        key: private_key.to_vec(),
                        chain,
                        begin_refresh_at: begin_refresh_at + jitter(),
                        not_after,
                        overdue_said: false,
                        expired_said: false,
                    })));
                }
                _ => {}
            }
        }
        Ok(Some(Answer::Pending))
    }

    /// A new key and a PodCertificateRequest for it.
    async fn ask(
        &self,
        pod: &Pod,
        source: &PodCertificateProjection,
        node: Option<&Node>,
    ) -> Result<Asked, String> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let client = self.connection.borrow().client.clone();
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
        let account = accounts
            .get(&service_account)
            .await
            .map_err(|e| format!("while fetching service account: {e}"))?;
        let node_uid = node.and_then(|n| n.metadata.uid.clone()).ok_or_else(|| {
            format!(
                "while getting node object from local cache: node \"{}\" not found",
                self.node_name
            )
        })?;
        let key_type = source.key_type.clone();
        let made = tokio::task::spawn_blocking(move || certificate_key::generate(&key_type))
            .await
            .map_err(|e| format!("while generating keypair: {e}"))?
            .map_err(|e| format!("while generating keypair: {e}"))?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let request = PodCertificateRequest {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                generate_name: Some("req-".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod_name.clone(),
                    uid: pod_uid.clone(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: RequestSpec {
                signer_name: source.signer_name.clone(),
                pod_name,
                pod_uid,
                service_account_name: service_account,
                service_account_uid: account.metadata.uid.unwrap_or_default(),
                node_name: self.node_name.clone(),
                node_uid,
                max_expiration_seconds: source.max_expiration_seconds,
                stub_pkcs10_request: base64::engine::general_purpose::STANDARD
                    .encode(&made.request),
                unverified_user_annotations: user_annotations(source),
            },
            status: None,
        };
        // The watch is running before the request is made, so that it
        // shows the request as soon as it can.
        drop(self.store());
        let requests: Api<PodCertificateRequest> = Api::namespaced(client, &namespace);
        let created = requests
            .create(&PostParams::default(), &request)
            .await
            .map_err(|e| format!("while creating on API: {e}"))?;
        let created_at = created
            .metadata
            .creation_timestamp
            .map_or_else(SystemTime::now, |t| SystemTime::from(t.0));
        Ok(Asked {
            key: made.key_pem,
            name: created.metadata.name.unwrap_or_default(),
            abandon_at: created_at + ASSUME_DELETED + jitter(),
        })
    }

    /// The watch of the node's requests, started now if it is not.
    fn store(&self) -> Store<PodCertificateRequest> {
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((store, _)) = watch.as_ref() {
            return store.clone();
        }
        let (store, writer) = reflector::store();
        let stop = CancellationToken::new();
        let api: Api<PodCertificateRequest> = Api::all(self.connection.borrow().client.clone());
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.node_name));
        let changed = self.changed.clone();
        let failed = |e: &watcher::Error| {
            tracing::warn!(error = %e, "watching the node's PodCertificateRequests failed; watching again with backoff");
        };
        spawn_watch(
            api,
            config,
            writer,
            stop.clone(),
            (move || changed.notify_waiters(), failed),
        );
        *watch = Some((store.clone(), stop));
        store
    }
}

impl Drop for PodCertificates {
    fn drop(&mut self) {
        if let Ok(watch) = self.watch.lock()
            && let Some((_, stop)) = watch.as_ref()
        {
            stop.cancel();
        }
    }
}

/// How many of the pods' podCertificate projections are in each state, by
/// signer: the kubelet's `kubelet_podcertificate_states` gauge
/// (`not_yet_issued`, `fresh`, `overdue_for_refresh`, `expired`,
/// `denied`, `failed`). Cheap to clone.
#[derive(Clone)]
pub struct PodCertificateStates(pub(crate) Arc<PodCertificates>);

impl std::fmt::Debug for PodCertificateStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PodCertificateStates")
            .finish_non_exhaustive()
    }
}

impl MetricsSource for PodCertificateStates {
    fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }
}

impl Collector for PodCertificateStates {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let states = self.0.states();
        if states.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "kubelet_podcertificate_states",
            "Gauge vector reporting the number of pod certificate projected volume sources, faceted by signer_name and state.",
            None,
            MetricType::Gauge,
        )?;
        for ((signer, state), count) in &states {
            let labels = [("signer_name", signer.as_str()), ("state", *state)];
            family.encode_family(&labels)?.encode_gauge(count)?;
        }
        Ok(())
    }
}

/// The source's `userAnnotations`, read through its JSON: the API types
/// of the oldest Kubernetes version an application may pick have no such
/// field (there the pod's are lost when it is read, and none are sent).
fn user_annotations(source: &PodCertificateProjection) -> Option<BTreeMap<String, String>> {
    let json = serde_json::to_value(source).ok()?;
    serde_json::from_value(json.get("userAnnotations")?.clone()).ok()
}

/// Up to five minutes, at random.
fn jitter() -> Duration {
    let nanos = u64::try_from(JITTER.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..nanos))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_projections_errors_are_the_kubelets() {
        assert_eq!(
            State::Initial.bundle().err().unwrap().to_string(),
            "credential bundle is not issued yet"
        );
        let denied = State::Denied {
            reason: "Policy".into(),
            message: "no \"pods\" here".into(),
        };
        assert_eq!(
            denied.bundle().err().unwrap().to_string(),
            "PodCertificateRequest was permanently denied: reason=\"Policy\" message=\"no \\\"pods\\\" here\""
        );
        let failed = State::Failed {
            reason: "Broken".into(),
            message: "m".into(),
        };
        assert_eq!(
            failed.bundle().err().unwrap().to_string(),
            "PodCertificateRequest was permanently failed: reason=\"Broken\" message=\"m\""
        );
    }

    #[test]
    fn an_issued_certificate_is_fresh_then_overdue_then_expired() {
        let now = SystemTime::now();
        let issued = |begin: SystemTime, not_after: SystemTime| {
            State::Fresh(Issued {
                key: b"k".to_vec(),
                chain: b"c".to_vec(),
                begin_refresh_at: begin,
                not_after,
                overdue_said: false,
                expired_said: false,
            })
        };
        let hour = Duration::from_secs(3600);
        assert_eq!(
            issued(now + hour, now + 2 * hour).metric_state(now),
            "fresh"
        );
        assert_eq!(
            issued(now - hour, now + hour).metric_state(now),
            "overdue_for_refresh"
        );
        assert_eq!(
            issued(now - 2 * hour, now - hour).metric_state(now),
            "expired"
        );
        assert_eq!(
            issued(now + hour, now + 2 * hour).bundle().unwrap(),
            (b"k".to_vec(), b"c".to_vec())
        );
    }

    #[test]
    fn the_sources_user_annotations_are_read_from_its_json() {
        let source: PodCertificateProjection = serde_json::from_value(serde_json::json!({
            "signerName": "example.com/s", "keyType": "ED25519",
            "userAnnotations": {"example.com/a": "b"}}))
        .unwrap();
        assert_eq!(
            user_annotations(&source),
            Some(BTreeMap::from([(
                "example.com/a".to_string(),
                "b".to_string()
            )]))
        );
        let none: PodCertificateProjection = serde_json::from_value(
            serde_json::json!({"signerName": "example.com/s", "keyType": "ED25519"}),
        )
        .unwrap();
        assert_eq!(user_annotations(&none), None);
    }
}

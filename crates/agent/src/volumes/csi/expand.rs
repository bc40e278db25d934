//! A claimed volume grown on the node, as the kubelet's node expander
//! grows it (`NodeExpandVolume`). The size the node knows a volume at is
//! kept per volume (the claim's `status.capacity` when first seen, as the
//! kubelet's actual state of the world starts it); when the
//! PersistentVolume says more (the resizer grew it), the claim is read
//! again, and with the resizer's `allocatedResources` and the
//! `NodeResizePending` mark the node takes its part: the claim marked
//! `NodeResizeInProgress`, the driver asked (its `EXPAND_VOLUME`
//! capability first, then `nodeExpandSecretRef`, the multi-writer
//! capability for the access mode), and the claim's `status.capacity` set
//! to the new size with the mark cleared. A failure the driver is done with
//! is written on the claim (`NodeResizeError`, and `NodeResizeInfeasible`
//! when the size cannot be had); one it may still be at work on is tried
//! again. A volume grown at its first mount into a pod that fails keeps
//! the pod waiting; one grown while in use does not stop its pods.
//!
//! A claim whose resizer sets neither mark (an older external resizer) is
//! grown as the kubelet grows it then: the driver asked straight away and
//! the claim's capacity set after.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tonic::Code;

use crate::volumes::csi::calls::DriverCalls;
use crate::volumes::csi::context::CsiContext;
use crate::volumes::csi::names;
use crate::volumes::csi::requests;
use crate::volumes::csi::source::{CsiVolume, storage};
use crate::volumes::error::Warning;

/// The claim's resize status while the node is to grow it.
const NODE_RESIZE_PENDING: &str = "NodeResizePending";
/// ... while the node grows it.
const NODE_RESIZE_IN_PROGRESS: &str = "NodeResizeInProgress";
/// ... when the node cannot grow it to the size asked.
const NODE_RESIZE_INFEASIBLE: &str = "NodeResizeInfeasible";
/// The claim's condition when the node failed to grow it.
const NODE_RESIZE_ERROR: &str = "NodeResizeError";
/// The claim's conditions that belong to a resize (the others are kept).
const RESIZE_CONDITIONS: [&str; 4] = [
    "FileSystemResizePending",
    "Resizing",
    "ControllerResizeError",
    NODE_RESIZE_ERROR,
];
/// The claim annotation that says a volume shared by nodes need not be
/// grown on each.
const NODE_EXPANSION_NOT_REQUIRED: &str = "volume.kubernetes.io/node-expansion-not-required";

/// What the node knows of one volume's size.
#[derive(Debug, Clone, Copy, Default)]
struct Known {
    /// The size it has on the node, in bytes.
    bytes: i64,
    /// The driver refused to grow it while in use: not tried again.
    in_use: bool,
    /// The driver failed to grow it for good.
    failed: bool,
}

/// How an expansion ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Grown, or nothing left to do: the node knows it at this size.
    Done(i64),
    /// Not the node's turn yet (the resizer has not asked): nothing done.
    Waiting,
    /// Not done, and not to be tried again while in use.
    Stopped,
}

/// Why an expansion failed.
struct Failure {
    message: String,
}

/// The node's expansions, shared by every pod's volumes.
#[derive(Default)]
pub(crate) struct Expander {
    known: Mutex<HashMap<String, Known>>,
    /// (volume, pod UID) whose first mount failed to grow the volume: it
    /// is grown again before the pod may start.
    mount_failed: Mutex<HashSet<(String, String)>>,
    /// Warnings for pods, by UID, until their worker takes them.
    warnings: Mutex<HashMap<String, Vec<Warning>>>,
}

impl Expander {
    /// Grows `volume` (published for pod `uid` at `target`; `mounted_now`
    /// when this pass published it) when its PersistentVolume is larger
    /// than the node knows it. An error only when the pod must wait (the
    /// first mount's expansion failed); a failure while in use is a
    /// warning for the pod, and tried again at its next pass.
    pub(crate) async fn grow(
        &self,
        context: &CsiContext,
        calls: &DriverCalls,
        volume: &CsiVolume,
        uid: &str,
        target: &str,
        mounted_now: bool,
    ) -> Result<(), String> {
        let (Some(desired), Some((namespace, claim))) = (volume.capacity, &volume.claim) else {
            return Ok(());
        };
        if volume.read_only {
            // As the kubelet: a read-only mount is never grown.
            return Ok(());
        }
        let unique = names::unique_name(&volume.driver, &volume.handle);
        let key = (unique.clone(), uid.to_string());
        let at_mount = mounted_now || self.lock_mount_failed().contains(&key);
        let known = *self
            .lock_known()
            .entry(unique.clone())
            .or_insert_with(|| Known {
                bytes: volume.claim_capacity.unwrap_or(0),
                ..Known::default()
            });
        let needed = if at_mount {
            // At mount the claim's own capacity is compared.
            volume.claim_capacity.unwrap_or(0) < desired
        } else {
            !known.in_use && known.bytes != 0 && known.bytes < desired
        };
        if !needed {
            self.lock_mount_failed().remove(&key);
            return Ok(());
        }
        let attempt = Attempt {
            context,
            calls,
            volume,
            namespace,
            claim,
            target,
            failed_before: known.failed,
        };
        let old = if at_mount {
            volume.claim_capacity.unwrap_or(0)
        } else {
            known.bytes
        };
        match attempt.run(old, desired).await {
            Ok(outcome) => {
                self.lock_mount_failed().remove(&key);
                let mut all = self.lock_known();
                let entry = all.entry(unique).or_default();
                match outcome {
                    Outcome::Done(bytes) => {
                        entry.bytes = bytes;
                        entry.failed = false;
                    }
                    Outcome::Stopped => entry.in_use = true,
                    Outcome::Waiting => {}
                }
                Ok(())
            }
            Err((failure, finished)) => {
                if finished {
                    self.lock_known().entry(unique).or_default().failed = true;
                }
                if at_mount {
                    self.lock_mount_failed().insert(key);
                    return Err(format!(
                        "MountVolume.Setup failed while expanding volume for volume {:?} : {}",
                        volume.spec_name, failure.message
                    ));
                }
                tracing::warn!(volume = %volume.spec_name, error = %failure.message, "cannot grow the volume on the node; trying again at the pod's next pass");
                self.warn(
                    uid,
                    Warning {
                        reason: "VolumeResizeFailed",
                        message: format!(
                            "NodeExpandVolume.NodeExpandVolume failed for volume {:?} : {}",
                            volume.spec_name, failure.message
                        ),
                    },
                );
                Ok(())
            }
        }
    }

    /// The volume `unique` is gone from the node: its size is learnt again
    /// when it comes back.
    pub(crate) fn forget_volume(&self, unique: &str) {
        self.lock_known().remove(unique);
        self.lock_mount_failed()
            .retain(|(volume, _)| volume != unique);
    }

    /// Pod `uid` is gone.
    pub(crate) fn forget_pod(&self, uid: &str) {
        self.lock_mount_failed().retain(|(_, pod)| pod != uid);
        self.lock_warnings().remove(uid);
    }

    /// The warnings for pod `uid` since last asked.
    pub(crate) fn take_warnings(&self, uid: &str) -> Vec<Warning> {
        self.lock_warnings().remove(uid).unwrap_or_default()
    }

    fn warn(&self, uid: &str, warning: Warning) {
        self.lock_warnings()
            .entry(uid.to_string())
            .or_default()
            .push(warning);
    }

    fn lock_known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_mount_failed(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        self.mount_failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_warnings(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Warning>>> {
        self.warnings.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One expansion of one volume.
struct Attempt<'a> {
    context: &'a CsiContext,
    calls: &'a DriverCalls,
    volume: &'a CsiVolume,
    namespace: &'a str,
    claim: &'a str,
    target: &'a str,
    /// An earlier attempt failed for good.
    failed_before: bool,
}

/// What the claim says of its resize.
struct ClaimState {
    status_capacity: i64,
    /// `status.allocatedResources` of storage, as written (a quantity).
    allocated: Option<String>,
    resize_status: Option<String>,
    requested: Option<i64>,
    shared: bool,
}

impl ClaimState {
    fn of(pvc: &PersistentVolumeClaim) -> Self {
        let status = pvc.status.as_ref();
        let spec = pvc.spec.as_ref();
        let shared = spec
            .and_then(|s| s.access_modes.as_ref())
            .is_some_and(|m| m.iter().any(|m| m == "ReadWriteMany"))
            && !pvc
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(NODE_EXPANSION_NOT_REQUIRED));
        Self {
            status_capacity: storage(status.and_then(|s| s.capacity.as_ref())).unwrap_or(0),
            allocated: status
                .and_then(|s| s.allocated_resources.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.clone()),
            resize_status: status
                .and_then(|s| s.allocated_resource_statuses.as_ref())
                .and_then(|r| r.get("storage"))
                .cloned(),
            requested: storage(
                spec.and_then(|s| s.resources.as_ref())
                    .and_then(|r| r.requests.as_ref()),
            ),
            shared,
        }
    }
}

/// What the pre-check found, when the node is to grow the volume.
#[derive(Debug, PartialEq, Eq)]
struct Check {
    /// The claim has the size already (a volume shared by nodes, grown on
    /// each): nothing to write on it.
    already: bool,
    /// A failure is to be written as infeasible (the claim asks for
    /// another size than the one that failed for good before).
    infeasible_on_failure: bool,
}

/// The kubelet's pre-check (`runPreCheck`) of growing to `wanted` a
/// volume of the claim in `state`: whether the node is to grow it, or how
/// it ends without.
fn pre_check(state: &ClaimState, wanted: i64, failed_before: bool) -> Result<Check, Outcome> {
    let infeasible_on_failure = state.requested != Some(wanted) && failed_before;
    let already = state.status_capacity >= wanted && state.resize_status.is_none();
    let allowed = (already && state.shared)
        || matches!(
            state.resize_status.as_deref(),
            Some(NODE_RESIZE_PENDING | NODE_RESIZE_IN_PROGRESS)
        );
    if allowed {
        Ok(Check {
            already,
            infeasible_on_failure,
        })
    } else if already {
        Err(Outcome::Done(wanted))
    } else {
        Err(Outcome::Waiting)
    }
}

impl Attempt<'_> {
    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.context.client(), self.namespace)
    }

    /// Grows the volume from `old` to what the claim asks (`desired`, the
    /// PersistentVolume's size, with an older resizer). The error, and
    /// whether the driver is done with the call.
    async fn run(&self, old: i64, desired: i64) -> Result<Outcome, (Failure, bool)> {
        let fail = |message: String| {
            (
                Failure {
                    message: format!("mountVolume.NodeExpandVolume get PVC failed : {message}"),
                },
                false,
            )
        };
        if desired <= old {
            return Ok(Outcome::Done(old));
        }
        let pvc = self
            .claims()
            .get(self.claim)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let state = ClaimState::of(&pvc);
        if state.resize_status.is_none() && state.allocated.is_none() {
            return self.legacy(&pvc, &state, desired).await;
        }
        let wanted_text = state.allocated.clone().unwrap_or_else(|| "0".into());
        let wanted = nodeplugins_api::quantity::value(&wanted_text).unwrap_or(0);
        let Check {
            already,
            infeasible_on_failure,
        } = match pre_check(&state, wanted, self.failed_before) {
            Ok(check) => check,
            Err(outcome) => return Ok(outcome),
        };
        let mut pvc = pvc;
        if !already {
            pvc = self
                .patch(
                    &pvc,
                    json!({"status": {"allocatedResourceStatuses": {"storage": NODE_RESIZE_IN_PROGRESS}}}),
                    true,
                )
                .await
                .map_err(|e| {
                    (
                        Failure {
                            message: format!(
                                "MountVolume.NodeExpandVolume failed to mark node expansion in progress: {e}"
                            ),
                        },
                        false,
                    )
                })?;
        }
        match self.expand(wanted).await {
            Ok(()) => {}
            Err(ExpandError::NotSupported(_)) if already => return Ok(Outcome::Done(wanted)),
            Err(error) => {
                let finished = error.finished();
                if finished {
                    let infeasible = error.infeasible() || infeasible_on_failure;
                    let mut status =
                        json!({"conditions": conditions_with_error(&pvc, &error.to_string())});
                    if infeasible {
                        status["allocatedResourceStatuses"] =
                            json!({"storage": NODE_RESIZE_INFEASIBLE});
                    }
                    if let Err(e) = self.patch(&pvc, json!({"status": status}), false).await {
                        tracing::warn!(claim = %self.claim, error = %e, "cannot write on the claim that the node failed to grow its volume");
                    }
                }
                if matches!(error, ExpandError::InUse(_)) {
                    tracing::warn!(volume = %self.volume.spec_name, error = %error, "the driver cannot grow the volume while it is in use; not tried again");
                    return Ok(Outcome::Stopped);
                }
                return Err((
                    Failure {
                        message: error.to_string(),
                    },
                    finished,
                ));
            }
        }
        tracing::info!(volume = %self.volume.spec_name, bytes = wanted, "the volume is grown on the node");
        if already {
            return Ok(Outcome::Done(wanted));
        }
        let mut status = json!({
            "capacity": {"storage": wanted_text},
            "allocatedResourceStatuses": {"storage": null},
        });
        status["conditions"] = kept_conditions(&pvc);
        self.patch(&pvc, json!({"status": status}), true)
            .await
            .map_err(|e| {
                (
                    Failure {
                        message: format!(
                            "mountVolume.NodeExpandVolume update pvc status failed: {e}"
                        ),
                    },
                    true,
                )
            })?;
        Ok(Outcome::Done(wanted))
    }

    /// The expansion of a claim no recent resizer marked: the driver asked
    /// at once, the claim's capacity set after (`MarkFSResizeFinished`).
    async fn legacy(
        &self,
        pvc: &PersistentVolumeClaim,
        state: &ClaimState,
        desired: i64,
    ) -> Result<Outcome, (Failure, bool)> {
        match self.expand(desired).await {
            Ok(()) => {}
            Err(ExpandError::NotSupported(_)) => return Ok(Outcome::Done(desired)),
            Err(error @ ExpandError::InUse(_)) => {
                tracing::warn!(volume = %self.volume.spec_name, error = %error, "the driver cannot grow the volume while it is in use; not tried again");
                return Ok(Outcome::Stopped);
            }
            Err(error) => {
                let finished = error.finished();
                return Err((
                    Failure {
                        message: error.to_string(),
                    },
                    finished,
                ));
            }
        }
        if state.status_capacity >= desired {
            return Ok(Outcome::Done(desired));
        }
        let capacity = self
            .volume
            .capacity
            .map(|b| b.to_string())
            .unwrap_or_default();
        let status = json!({
            "capacity": {"storage": capacity},
            "conditions": kept_conditions(pvc),
        });
        self.patch(pvc, json!({"status": status}), true)
            .await
            .map_err(|e| {
                (
                    Failure {
                        message: format!(
                            "mountVolume.NodeExpandVolume update PVC status failed : {e}"
                        ),
                    },
                    true,
                )
            })?;
        Ok(Outcome::Done(desired))
    }

    /// Asks the driver to grow the volume to `bytes`, as the kubelet's CSI
    /// expander asks.
    async fn expand(&self, bytes: i64) -> Result<(), ExpandError> {
        let capabilities = self.calls.capabilities().await.map_err(|e| {
            ExpandError::Other(
                format!(
                    "Expander.NodeExpand failed to check if node supports expansion : {}",
                    e.message
                ),
                true,
            )
        })?;
        if !capabilities.expand {
            return Err(ExpandError::NotSupported(format!(
                "NodeExpand is not supported by the CSI driver {}",
                self.volume.driver
            )));
        }
        let secrets = match &self.volume.expand_secret {
            Some(secret) => self
                .context
                .secret("NodeExpandSecretRef", secret)
                .await
                .map_err(|e| {
                    ExpandError::Other(
                        format!(
                            "expander.NodeExpand failed to get NodeExpandSecretRef {}/{}: {e}",
                            secret.namespace, secret.name
                        ),
                        true,
                    )
                })?,
            None => BTreeMap::new(),
        };
        let single_node_multi_writer = self
            .calls
            .capabilities()
            .await
            .map_err(|e| ExpandError::Other(e.message, true))?
            .single_node_multi_writer;
        let staging =
            names::staging_path(&self.context.root, &self.volume.driver, &self.volume.handle);
        let request = requests::expand(
            self.volume,
            self.target,
            &staging.to_string_lossy(),
            bytes,
            secrets,
            single_node_multi_writer,
        );
        self.calls
            .expand(request)
            .await
            .map_err(|(code, failure)| match code {
                Some(Code::FailedPrecondition) => ExpandError::InUse(format!(
                    "Expander.NodeExpand failed to expand the volume : {}",
                    failure.message
                )),
                Some(Code::InvalidArgument | Code::OutOfRange | Code::NotFound) => {
                    ExpandError::Infeasible(format!(
                        "Expander.NodeExpand failed to expand the volume {}",
                        failure.message
                    ))
                }
                _ if !failure.finished => ExpandError::Other(failure.message, false),
                _ => ExpandError::Other(
                    format!(
                        "Expander.NodeExpand failed to expand the volume : {}",
                        failure.message
                    ),
                    true,
                ),
            })
    }

    /// Patches the claim's status with `patch` (a merge patch; `checked`:
    /// only if the claim is still as read).
    async fn patch(
        &self,
        pvc: &PersistentVolumeClaim,
        mut patch: Value,
        checked: bool,
    ) -> Result<PersistentVolumeClaim, kube::Error> {
        if checked && let Some(version) = &pvc.metadata.resource_version {
            patch["metadata"] = json!({"resourceVersion": version});
        }
        self.claims()
            .patch_status(self.claim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
    }
}

/// Why the driver did not grow a volume.
#[derive(Debug, thiserror::Error)]
enum ExpandError {
    /// It does not grow volumes on the node.
    #[error("{0}")]
    NotSupported(String),
    /// It cannot while the volume is in use (`FailedPrecondition`).
    #[error("{0}")]
    InUse(String),
    /// It cannot have that size (`InvalidArgument`, `OutOfRange`,
    /// `NotFound`).
    #[error("{0}")]
    Infeasible(String),
    /// Anything else, and whether it is done with the call.
    #[error("{0}")]
    Other(String, bool),
}

impl ExpandError {
    fn finished(&self) -> bool {
        !matches!(self, Self::Other(_, false))
    }

    fn infeasible(&self) -> bool {
        matches!(self, Self::Infeasible(_))
    }
}

/// The claim's conditions without its resize ones, as the patch writes
/// them (`null` for none).
fn kept_conditions(pvc: &PersistentVolumeClaim) -> Value {
    let dropped = |t: &str| RESIZE_CONDITIONS.contains(&t);
    let kept: Vec<Value> = pvc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !dropped(&c.type_))
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    if kept.is_empty() {
        Value::Null
    } else {
        Value::Array(kept)
    }
}

/// The claim's conditions with a `NodeResizeError` for `error` (an
/// earlier one of the same status kept as it was).
fn conditions_with_error(pvc: &PersistentVolumeClaim, error: &str) -> Value {
    let mut conditions: Vec<Value> = pvc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let present = conditions
        .iter()
        .any(|c| c["type"] == NODE_RESIZE_ERROR && c["status"] == "True");
    if !present {
        conditions.retain(|c| c["type"] != NODE_RESIZE_ERROR);
        conditions.push(json!({
            "type": NODE_RESIZE_ERROR,
            "status": "True",
            "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "message": format!("failed to expand pvc with {error}"),
        }));
    }
    Value::Array(conditions)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn claim(status: Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_claims_resize_is_read_from_its_status() {
        let state = ClaimState::of(&claim(json!({
            "capacity": {"storage": "1Gi"},
            "allocatedResources": {"storage": "2Gi"},
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
        })));
        assert_eq!(state.status_capacity, 1 << 30);
        assert_eq!(state.allocated.as_deref(), Some("2Gi"));
        assert_eq!(state.resize_status.as_deref(), Some(NODE_RESIZE_PENDING));
        assert_eq!(state.requested, Some(2 << 30));
        assert!(!state.shared);
    }

    #[test]
    fn the_node_grows_a_volume_only_when_the_resizer_asks_it() {
        let state = |capacity: i64, status: Option<&str>, shared: bool| ClaimState {
            status_capacity: capacity,
            allocated: Some("2".into()),
            resize_status: status.map(str::to_string),
            requested: Some(2),
            shared,
        };
        let go = |already| {
            Ok(Check {
                already,
                infeasible_on_failure: false,
            })
        };
        assert_eq!(
            pre_check(&state(1, Some(NODE_RESIZE_PENDING), false), 2, false),
            go(false)
        );
        assert_eq!(
            pre_check(&state(1, Some(NODE_RESIZE_IN_PROGRESS), false), 2, false),
            go(false)
        );
        // The controller's part is not done yet.
        assert_eq!(
            pre_check(
                &state(1, Some("ControllerResizeInProgress"), false),
                2,
                false
            ),
            Err(Outcome::Waiting)
        );
        assert_eq!(
            pre_check(&state(1, None, false), 2, false),
            Err(Outcome::Waiting)
        );
        // Grown already (by another node, or fully by the controller).
        assert_eq!(
            pre_check(&state(2, None, false), 2, false),
            Err(Outcome::Done(2))
        );
        // A volume shared by nodes is grown on each.
        assert_eq!(pre_check(&state(2, None, true), 2, false), go(true));
        // The claim now asks for another size than the one that failed.
        let mut other = state(1, Some(NODE_RESIZE_PENDING), false);
        other.requested = Some(3);
        assert_eq!(
            pre_check(&other, 2, true),
            Ok(Check {
                already: false,
                infeasible_on_failure: true
            })
        );
    }

    #[test]
    fn finishing_drops_the_resize_conditions_and_keeps_the_others() {
        let pvc = claim(json!({"conditions": [
            {"type": "FileSystemResizePending", "status": "True"},
            {"type": "ModifyingVolume", "status": "True"},
        ]}));
        assert_eq!(
            kept_conditions(&pvc),
            json!([{"type": "ModifyingVolume", "status": "True"}])
        );
        let none = claim(json!({"conditions": [{"type": "Resizing", "status": "True"}]}));
        assert_eq!(kept_conditions(&none), Value::Null);
    }

    #[test]
    fn a_failure_adds_one_node_resize_error() {
        let pvc = claim(json!({}));
        let once = conditions_with_error(&pvc, "boom");
        assert_eq!(once[0]["type"], NODE_RESIZE_ERROR);
        assert_eq!(once[0]["message"], "failed to expand pvc with boom");
        let again: PersistentVolumeClaim = {
            let mut pvc = serde_json::to_value(&pvc).unwrap();
            pvc["status"]["conditions"] = once.clone();
            serde_json::from_value(pvc).unwrap()
        };
        assert_eq!(conditions_with_error(&again, "other"), once);
    }
}

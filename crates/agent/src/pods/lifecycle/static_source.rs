//! The pods owner's second source: the static pods read from the node's
//! files, followed beside the API's pods as the kubelet's pod config
//! merges its file and API sources. A static pod is tracked by its own
//! UID, admitted and run as any pod, and stopped when its manifest goes
//! or changes (a changed manifest is a new UID: the old pod stops, and
//! only then is the new one admitted, one static pod of a name at a time). Its mirror pod in the API is never run; a change to it
//! wakes the mirror pods' sync and the static pod's worker (its status
//! goes to the mirror).

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::owner::Owner;
use crate::pods::admit::spec::{MIRROR_ANNOTATION, is_static};

impl Owner {
    /// The static pod path changed: its pods followed, those gone stopped.
    pub(super) fn on_static(&mut self) {
        let Some(receiver) = &mut self.static_pods else {
            return;
        };
        let Some(set) = receiver.borrow_and_update().clone() else {
            return;
        };
        let mut present = HashSet::new();
        for pod in set.values() {
            let Some(uid) = self.upsert(pod.clone()) else {
                continue;
            };
            self.update_lanes(&uid, pod);
            self.cancel_unwanted(&uid);
            present.insert(uid);
        }
        let gone: Vec<String> = self
            .tracked
            .iter()
            .filter(|(uid, t)| {
                t.in_api() && t.pod().is_some_and(|p| is_static(p)) && !present.contains(*uid)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(tracked) = self.tracked.get_mut(&uid) {
                tracked.gone(None);
            }
            self.cancel_unwanted(&uid);
            self.dirty.insert(uid);
        }
    }

    /// A mirror pod changed in the API: the mirror pods' sync looks again,
    /// and its static pod's worker writes its status there.
    pub(super) fn on_mirror(&mut self, mirror: &Pod) {
        self.mirrors_changed.notify_one();
        let Some(uid) = mirror
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIRROR_ANNOTATION))
        else {
            return;
        };
        for running in self.running.values() {
            if running.uid == *uid
                && let Some((_, pod)) = &running.lane
            {
                pod.send_modify(|_| {});
            }
        }
    }

    /// Whether static pod `uid` waits for another pod of its name (an
    /// older version of its manifest) to stop first: one static pod of a
    /// name runs at a time, as the kubelet's pod workers allow.
    pub(super) fn name_held(&self, uid: &str) -> bool {
        let Some(pod) = self.tracked.get(uid).and_then(|t| t.pod()) else {
            return false;
        };
        if !is_static(pod) {
            return false;
        }
        let name = (&pod.metadata.namespace, &pod.metadata.name);
        self.tracked.iter().any(|(other, t)| {
            other != uid
                && !t.forgettable()
                && t.pod()
                    .is_some_and(|p| (&p.metadata.namespace, &p.metadata.name) == name)
        })
    }

    /// Gives the operations of pod `uid` its latest `pod`.
    pub(super) fn update_lanes(&self, uid: &str, pod: &Arc<Pod>) {
        for running in self.running.values() {
            if running.uid == uid
                && let Some((_, pod_tx)) = &running.lane
            {
                pod_tx.send_replace(pod.clone());
            }
        }
    }
}

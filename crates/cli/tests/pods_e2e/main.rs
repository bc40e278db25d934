//! The node serves its pods from the API, with the real consumers in the
//! loop: the scheduler places pods and allocates their claims, the
//! controller-manager makes claims from templates, and our agent, with the
//! SDK's example device plugin and DRA driver, admits each pod bound to
//! its node without any command (devices, init containers first; claims
//! prepared) and gives everything back when the pod goes. The kubelet's
//! own device manager and DRA manager (`interop/cmd/kubelet-pods`), given
//! the same pods on a node of their own, are the reference container by
//! container.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod lifecycle;
mod order;
mod reference;

use std::collections::BTreeSet;

use common::pods::*;
use serde_json::Value;

/// The node our agent serves.
const NODE: &str = "node-1";

/// Container `name` of `pod` (a `nodeplugins pods` row).
fn container_of(pod: &Value, name: &str) -> Value {
    containers(pod)
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {pod}"))
}

/// The strings of the JSON array `value` (none for anything else).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| item.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The device ids of `container` of `pod`.
fn devices_of(pod: &Value, container: &str) -> BTreeSet<String> {
    devices_of_resource(pod, container, RESOURCE)
}

/// The device ids of `resource` of `container` of `pod`.
fn devices_of_resource(pod: &Value, container: &str, resource: &str) -> BTreeSet<String> {
    strings(&container_of(pod, container)["devices"][resource])
        .into_iter()
        .collect()
}

/// The CDI devices of `container` of `pod` from its claims.
fn claim_cdi_of(pod: &Value, container: &str) -> Vec<String> {
    strings(&container_of(pod, container)["claim_cdi_devices"])
}

fn containers(pod: &Value) -> Vec<Value> {
    pod["containers"].as_array().cloned().unwrap_or_default()
}

/// Whether `pod` is admitted.
fn admitted(pod: &Value) -> bool {
    pod["phase"] == "admitted"
}

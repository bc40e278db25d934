//! What one pool needs to look as the driver says, computed as the Go
//! helper's resourceslice controller computes it:
//!
//! - a slice's index in the pool is the start of its name, hex, at least 5
//!   digits (`GenerateName: <index>-<driver>-<node>-`), so a slice is
//!   matched to the desired one of the same index;
//! - slices of an older generation than the newest, whose index matches
//!   no desired slice (or one already matched), or whose `spec.nodeName`
//!   is not the pool's (a pool moved between this node and others; the
//!   field cannot change), are obsolete and deleted first, with UID and
//!   resourceVersion preconditions;
//! - the generation stays when no slice is missing and at most one
//!   matched slice differs (one update), is the driver's when it asks for
//!   a higher one, and is otherwise bumped by one, in which case every
//!   matched slice is updated in place with it; missing slices are created.
//!
//! Slices are compared as the API stores them: a quantity by its value
//! (`1024Mi` is `1Gi`), an empty list as none, and a taint's time added,
//! which the server sets, taken from the slice on the server.

use k8s_openapi::api::resource::v1::{ResourcePool, ResourceSlice, ResourceSliceSpec};
use kube::ResourceExt;
use serde_json::Value;

use super::pool::{NodeSelection, Pool};
use super::quantity;

/// The fewest hex digits of a slice's index in its name.
const INDEX_MIN_DIGITS: usize = 5;

/// What it takes to make a pool's slices on the server show the pool.
#[derive(Debug, Default)]
pub(super) struct PoolPlan {
    /// The pool's generation once done.
    pub(super) generation: i64,
    /// Slices to delete, first.
    pub(super) deletes: Vec<ResourceSlice>,
    /// Slices to update in place: the desired slice's index, and the slice.
    pub(super) updates: Vec<(usize, ResourceSlice)>,
    /// The indexes of desired slices to create.
    pub(super) creates: Vec<usize>,
}

impl PoolPlan {
    /// Whether nothing needs doing.
    pub(super) fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.updates.is_empty() && self.creates.is_empty()
    }
}

/// Who publishes: the driver on its node.
#[derive(Debug, Clone)]
pub(super) struct Publisher<'a> {
    pub(super) driver: &'a str,
    pub(super) node: &'a str,
}

impl Publisher<'_> {
    /// The `generateName` of the slice at `index` of a pool of `count`.
    pub(super) fn generate_name(&self, index: usize, count: usize) -> String {
        let digits = index_digits(count);
        format!("{index:0digits$x}-{}-{}-", self.driver, self.node)
    }

    /// The spec of the slice at `index` of pool `name`.
    pub(super) fn spec(
        &self,
        name: &str,
        pool: &Pool,
        index: usize,
        generation: i64,
    ) -> ResourceSliceSpec {
        let slice = &pool.slices[index];
        let mut spec = ResourceSliceSpec {
            driver: self.driver.to_string(),
            pool: ResourcePool {
                name: name.to_string(),
                generation,
                resource_slice_count: pool.slices.len() as i64,
            },
            devices: (!slice.devices.is_empty() || slice.shared_counters.is_empty())
                .then(|| slice.devices.clone()),
            shared_counters: (!slice.shared_counters.is_empty())
                .then(|| slice.shared_counters.clone()),
            ..Default::default()
        };
        match &pool.node_selection {
            NodeSelection::ThisNode => spec.node_name = Some(self.node.to_string()),
            NodeSelection::NodeSelector(selector) => spec.node_selector = Some(selector.clone()),
            NodeSelection::AllNodes => spec.all_nodes = Some(true),
            NodeSelection::PerDevice => spec.per_device_node_selection = Some(true),
        }
        spec
    }

    /// What it takes to make `existing` (pool `name`'s slices on the
    /// server) show `pool`. `same(slice, index, desired)` says whether a
    /// slice already shows the desired spec of `index`.
    pub(super) fn plan(
        &self,
        name: &str,
        pool: &Pool,
        existing: Vec<ResourceSlice>,
        same: impl Fn(&ResourceSlice, usize, &ResourceSliceSpec) -> bool,
    ) -> PoolPlan {
        let count = pool.slices.len();
        let newest = existing
            .iter()
            .map(|s| s.spec.pool.generation)
            .max()
            .unwrap_or(0);
        let digits = index_digits(count);
        let node_name = match pool.node_selection {
            NodeSelection::ThisNode => Some(self.node),
            _ => None,
        };
        let mut matched: Vec<Option<ResourceSlice>> = vec![None; count];
        let mut deletes = Vec::new();
        for slice in existing {
            // A slice's node name cannot change: a pool moved between this
            // node and others is deleted and created again.
            if slice.spec.pool.generation < newest || slice.spec.node_name.as_deref() != node_name {
                deletes.push(slice);
                continue;
            }
            match decode_index(&slice.name_any(), digits) {
                Some(index) if index < count && matched[index].is_none() => {
                    matched[index] = Some(slice);
                }
                _ => deletes.push(slice),
            }
        }
        let changed: Vec<usize> = matched
            .iter()
            .enumerate()
            .filter_map(|(index, slice)| {
                let slice = slice.as_ref()?;
                let desired = self.spec(name, pool, index, newest);
                (!same(slice, index, &desired)).then_some(index)
            })
            .collect();
        let missing: Vec<usize> = (0..count).filter(|i| matched[*i].is_none()).collect();
        let (generation, bumped) = if pool.generation > newest {
            (pool.generation, true)
        } else if missing.is_empty() && changed.len() <= 1 {
            (newest, false)
        } else {
            (newest + 1, true)
        };
        let updates = matched
            .into_iter()
            .enumerate()
            .filter_map(|(index, slice)| {
                let slice = slice?;
                (bumped || changed.contains(&index)).then_some((index, slice))
            })
            .collect();
        PoolPlan {
            generation,
            deletes,
            updates,
            creates: missing,
        }
    }
}

/// How many hex digits a slice's index has in a pool of `count` slices.
fn index_digits(count: usize) -> usize {
    let highest = count.saturating_sub(1);
    let digits = format!("{highest:x}").len();
    digits.max(INDEX_MIN_DIGITS)
}

/// The index at the start of slice name `name`, if it has `digits` hex
/// digits before the first `-`.
pub(super) fn decode_index(name: &str, digits: usize) -> Option<usize> {
    let (prefix, _) = name.split_once('-')?;
    if prefix.len() != digits {
        return None;
    }
    usize::from_str_radix(prefix, 16).ok()
}

/// Whether `current` (a slice's spec on the server) shows `desired`, as
/// the API stores specs.
pub(super) fn same_spec(current: &ResourceSliceSpec, desired: &ResourceSliceSpec) -> bool {
    let mut desired = desired.clone();
    copy_taint_times(current, &mut desired);
    normalized(current) == normalized(&desired)
}

/// Gives each of `desired`'s taints without a time the time of the same
/// taint of the same device in `current`, which the server set.
pub(super) fn copy_taint_times(current: &ResourceSliceSpec, desired: &mut ResourceSliceSpec) {
    let Some(current_devices) = &current.devices else {
        return;
    };
    for device in desired.devices.iter_mut().flatten() {
        let Some(current) = current_devices.iter().find(|d| d.name == device.name) else {
            continue;
        };
        for taint in device.taints.iter_mut().flatten() {
            if taint.time_added.is_some() {
                continue;
            }
            taint.time_added = current
                .taints
                .iter()
                .flatten()
                .find(|t| t.key == taint.key && t.value == taint.value && t.effect == taint.effect)
                .and_then(|t| t.time_added.clone());
        }
    }
}

/// `spec` as JSON, with nulls and empty lists and maps left out and every
/// quantity as its value.
pub(super) fn normalized(spec: &ResourceSliceSpec) -> Value {
    let mut value = serde_json::to_value(spec).unwrap_or(Value::Null);
    normalize(&mut value, false);
    value
}

/// The keys under which values are quantities.
const QUANTITY_PARENTS: [&str; 3] = ["capacity", "counters", "nodeAllocatableResources"];

fn normalize(value: &mut Value, quantities: bool) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                normalize(
                    child,
                    quantities || QUANTITY_PARENTS.contains(&key.as_str()),
                );
            }
            map.retain(|_, child| !is_empty(child));
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                normalize(item, quantities);
            }
        }
        Value::String(text) if quantities => {
            if let Some(canonical) = quantity::canonical(text) {
                *text = canonical;
            }
        }
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;

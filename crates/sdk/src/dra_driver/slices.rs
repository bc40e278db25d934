//! Publishing the driver's devices as ResourceSlices for its node (feature
//! `kube`), as the Go helper's resourceslice controller does:
//!
//! - each slice is created with `generateName: <node>-<driver>-`, an owner
//!   reference to the Node (`controller: true`), `spec.nodeName`,
//!   `spec.driver` and the pool's name, generation and slice count;
//! - a pool's slices of the newest generation are matched to the desired
//!   ones (same devices first); when at most one needs an update it is
//!   updated in place, otherwise the generation is bumped, new slices are
//!   created and the superseded ones deleted with UID and resourceVersion
//!   preconditions;
//! - the driver's slices are watched (the node may list and watch them with
//!   its `spec.nodeName` selector): one deleted by someone else, such as the
//!   kubelet's wipe after the driver was away, is published again at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The devices of one pool, in one or more slices.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// Each slice's devices.
    pub slices: Vec<Vec<Device>>,
}

impl Pool {
    /// A pool of `devices` in one slice.
    pub fn new(devices: Vec<Device>) -> Self {
        Self {
            slices: vec![devices],
        }
    }
}

/// The pools the driver publishes. Every change is published.
#[derive(Clone)]
pub struct Resources {
    tx: Arc<watch::Sender<BTreeMap<String, Pool>>>,
}

impl Default for Resources {
    fn default() -> Self {
        Self::new()
    }
}

impl Resources {
    /// No pools.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(BTreeMap::new()).0),
        }
    }

    /// Sets pool `name`.
    pub fn set_pool(&self, name: impl Into<String>, pool: Pool) {
        let name = name.into();
        self.tx.send_if_modified(|pools| {
            if pools.get(&name) == Some(&pool) {
                return false;
            }
            pools.insert(name, pool);
            true
        });
    }

    /// Removes pool `name`: its slices are deleted.
    pub fn remove_pool(&self, name: &str) {
        self.tx
            .send_if_modified(|pools| pools.remove(name).is_some());
    }

    /// The pools.
    pub fn pools(&self) -> BTreeMap<String, Pool> {
        self.tx.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<BTreeMap<String, Pool>> {
        self.tx.subscribe()
    }
}

/// The first retry after a failed publication; it doubles per failure.
const RETRY_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between publication attempts.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Publishes `resources` as driver `driver`'s slices of node `node` until
/// `shutdown`.
pub(crate) async fn publish(
    client: kube::Client,
    node: String,
    driver: String,
    resources: Resources,
    shutdown: CancellationToken,
) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let selector = format!("spec.nodeName={node},spec.driver={driver}");
    let mut events = watcher(slices.clone(), watcher::Config::default().fields(&selector))
        .default_backoff()
        .boxed();
    let mut desired = resources.subscribe();
    let mut publisher = Publisher {
        slices,
        nodes: Api::all(client),
        node,
        driver,
        node_uid: None,
        current: BTreeMap::new(),
    };
    let mut listed = false;
    let mut initial: BTreeMap<String, ResourceSlice> = BTreeMap::new();
    let mut failures: u32 = 0;
    let mut retry: Option<tokio::time::Instant> = None;
    loop {
        let mut sync = false;
        tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => match event {
                Some(Ok(watcher::Event::Init)) => initial.clear(),
                Some(Ok(watcher::Event::InitApply(slice))) => {
                    initial.insert(slice.name_any(), slice);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    publisher.current = std::mem::take(&mut initial);
                    listed = true;
                    sync = true;
                }
                Some(Ok(watcher::Event::Apply(slice))) => {
                    publisher.current.insert(slice.name_any(), slice);
                }
                Some(Ok(watcher::Event::Delete(slice))) => {
                    publisher.current.remove(&slice.name_any());
                    // Someone else's deletion is undone at once.
                    sync = true;
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watching ResourceSlices failed; watching again");
                }
                None => return,
            },
            changed = desired.changed() => {
                if changed.is_err() {
                    return;
                }
                sync = true;
            }
            () = sleep_until(retry) => {
                retry = None;
                sync = true;
            }
        }
        if !sync || !listed {
            continue;
        }
        let pools = desired.borrow_and_update().clone();
        match publisher.sync(&pools).await {
            Ok(()) => {
                failures = 0;
                retry = None;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let delay =
                    RETRY_MAX.min(RETRY_INITIAL * 2u32.saturating_pow(failures.min(16) - 1));
                tracing::warn!(error = %e, retry_in = ?delay, "publishing ResourceSlices failed");
                retry = Some(tokio::time::Instant::now() + delay);
            }
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

struct Publisher {
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    node: String,
    driver: String,
    node_uid: Option<String>,
    /// The driver's slices on the server, as last seen.
    current: BTreeMap<String, ResourceSlice>,
}

/// What one pool needs.
struct Plan {
    generation: i64,
    /// (existing slice, desired devices) to update in place.
    updates: Vec<(ResourceSlice, Vec<Device>)>,
    /// Desired devices to create as new slices.
    creates: Vec<Vec<Device>>,
    /// Slices to delete (superseded or unmatched).
    deletes: Vec<ResourceSlice>,
}

fn devices(slice: &ResourceSlice) -> &[Device] {
    slice.spec.devices.as_deref().unwrap_or_default()
}

/// What it takes to make `existing` (the pool's slices on the server) show
/// `desired`.
fn plan_pool(existing: Vec<ResourceSlice>, desired: &Pool) -> Plan {
    let generation = existing
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .unwrap_or(0);
    let count = desired.slices.len() as i64;
    let (newest, mut deletes): (Vec<ResourceSlice>, Vec<ResourceSlice>) = existing
        .into_iter()
        .partition(|s| s.spec.pool.generation == generation);
    // Match identical slices first, then pair what is left in order.
    let mut unmatched: Vec<ResourceSlice> = Vec::new();
    let mut wanted: Vec<Option<&Vec<Device>>> = desired.slices.iter().map(Some).collect();
    let mut kept: Vec<ResourceSlice> = Vec::new();
    for slice in newest {
        match wanted
            .iter_mut()
            .find(|w| w.is_some_and(|d| d.as_slice() == devices(&slice)))
        {
            Some(w) => {
                *w = None;
                kept.push(slice);
            }
            None => unmatched.push(slice),
        }
    }
    let left: Vec<&Vec<Device>> = wanted.into_iter().flatten().collect();
    let mut updates: Vec<(ResourceSlice, Vec<Device>)> = Vec::new();
    let mut creates: Vec<Vec<Device>> = Vec::new();
    let mut unmatched = unmatched.into_iter();
    for devices in left {
        match unmatched.next() {
            Some(slice) => updates.push((slice, devices.clone())),
            None => creates.push(devices.clone()),
        }
    }
    deletes.extend(unmatched);
    let count_wrong = kept
        .iter()
        .any(|s| s.spec.pool.resource_slice_count != count);
    if creates.is_empty() && updates.len() <= 1 && !count_wrong {
        return Plan {
            generation,
            updates,
            creates,
            deletes,
        };
    }
    // More than one change: a new generation of every slice of the pool.
    deletes.extend(kept);
    deletes.extend(updates.into_iter().map(|(slice, _)| slice));
    Plan {
        generation: generation + 1,
        updates: Vec::new(),
        creates: desired.slices.clone(),
        deletes,
    }
}

impl Publisher {
    async fn node_uid(&mut self) -> Result<String, kube::Error> {
        if let Some(uid) = &self.node_uid {
            return Ok(uid.clone());
        }
        let node = self.nodes.get(&self.node).await?;
        let uid = node.metadata.uid.unwrap_or_default();
        self.node_uid = Some(uid.clone());
        Ok(uid)
    }

    /// Makes the server show `pools` (and no other pool of this driver).
    async fn sync(&mut self, pools: &BTreeMap<String, Pool>) -> Result<(), kube::Error> {
        let mut by_pool: BTreeMap<String, Vec<ResourceSlice>> = BTreeMap::new();
        for slice in self.current.values() {
            by_pool
                .entry(slice.spec.pool.name.clone())
                .or_default()
                .push(slice.clone());
        }
        let names: BTreeSet<String> = by_pool.keys().chain(pools.keys()).cloned().collect();
        for name in names {
            let existing = by_pool.remove(&name).unwrap_or_default();
            match pools.get(&name) {
                Some(pool) => self.sync_pool(&name, existing, pool).await?,
                None => {
                    for slice in existing {
                        self.delete(&slice).await?;
                    }
                }
            }
        }
        Ok(())
    }

    async fn sync_pool(
        &mut self,
        name: &str,
        existing: Vec<ResourceSlice>,
        pool: &Pool,
    ) -> Result<(), kube::Error> {
        let plan = plan_pool(existing, pool);
        let spec_pool = ResourcePool {
            name: name.to_string(),
            generation: plan.generation,
            resource_slice_count: pool.slices.len() as i64,
        };
        for devices in &plan.creates {
            let uid = self.node_uid().await?;
            let slice = ResourceSlice {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}-{}-", self.node, self.driver)),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.node.clone(),
                        uid,
                        controller: Some(true),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: ResourceSliceSpec {
                    driver: self.driver.clone(),
                    node_name: Some(self.node.clone()),
                    pool: spec_pool.clone(),
                    devices: Some(devices.clone()),
                    ..Default::default()
                },
            };
            let created = self.slices.create(&PostParams::default(), &slice).await?;
            tracing::info!(slice = %created.name_any(), pool = %name, generation = plan.generation, "ResourceSlice created");
            self.current.insert(created.name_any(), created);
        }
        for (mut slice, devices) in plan.updates {
            slice.spec.devices = Some(devices);
            slice.spec.pool = spec_pool.clone();
            let updated = self
                .slices
                .replace(&slice.name_any(), &PostParams::default(), &slice)
                .await?;
            tracing::info!(slice = %updated.name_any(), pool = %name, "ResourceSlice updated");
            self.current.insert(updated.name_any(), updated);
        }
        for slice in plan.deletes {
            self.delete(&slice).await?;
        }
        Ok(())
    }

    /// Deletes `slice` if it is still the version seen.
    async fn delete(&mut self, slice: &ResourceSlice) -> Result<(), kube::Error> {
        let name = slice.name_any();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: slice.metadata.uid.clone(),
                resource_version: slice.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        match self.slices.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(e) => return Err(e),
        }
        tracing::info!(slice = %name, "ResourceSlice deleted");
        self.current.remove(&name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str) -> Device {
        Device {
            name: name.into(),
            ..Default::default()
        }
    }

    fn slice(name: &str, generation: i64, count: i64, devices: &[&str]) -> ResourceSlice {
        ResourceSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                pool: ResourcePool {
                    name: "pool".into(),
                    generation,
                    resource_slice_count: count,
                },
                devices: Some(devices.iter().map(|d| device(d)).collect()),
                ..Default::default()
            },
        }
    }

    fn pool(slices: &[&[&str]]) -> Pool {
        Pool {
            slices: slices
                .iter()
                .map(|s| s.iter().map(|d| device(d)).collect())
                .collect(),
        }
    }

    #[test]
    fn nothing_changes_for_the_same_devices_and_old_generations_go() {
        let existing = vec![slice("a", 2, 1, &["gpu-0"]), slice("old", 1, 1, &["gpu-9"])];
        let plan = plan_pool(existing, &pool(&[&["gpu-0"]]));
        assert_eq!(plan.generation, 2);
        assert!(plan.updates.is_empty() && plan.creates.is_empty());
        assert_eq!(plan.deletes.len(), 1);
        assert_eq!(plan.deletes[0].name_any(), "old");
    }

    #[test]
    fn one_changed_slice_is_updated_in_place_with_the_same_generation() {
        let existing = vec![slice("a", 1, 2, &["gpu-0"]), slice("b", 1, 2, &["gpu-1"])];
        let plan = plan_pool(existing, &pool(&[&["gpu-0"], &["gpu-1", "gpu-2"]]));
        assert_eq!(plan.generation, 1);
        assert_eq!(plan.updates.len(), 1);
        assert_eq!(plan.updates[0].0.name_any(), "b");
        assert!(plan.creates.is_empty() && plan.deletes.is_empty());
    }

    #[test]
    fn a_new_slice_or_two_changes_bump_the_generation_and_replace_every_slice() {
        let existing = vec![slice("a", 1, 1, &["gpu-0"])];
        let plan = plan_pool(existing, &pool(&[&["gpu-0"], &["gpu-1"]]));
        assert_eq!(plan.generation, 2);
        assert_eq!(plan.creates.len(), 2);
        assert_eq!(plan.deletes.len(), 1);

        let existing = vec![slice("a", 3, 2, &["x"]), slice("b", 3, 2, &["y"])];
        let plan = plan_pool(existing, &pool(&[&["x2"], &["y2"]]));
        assert_eq!(plan.generation, 4);
        assert_eq!((plan.creates.len(), plan.deletes.len()), (2, 2));
    }
}

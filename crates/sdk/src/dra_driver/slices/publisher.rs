//! The task that keeps the driver's ResourceSlices equal to its pools: it
//! watches the slices, plans each pool's writes ([`super::plan`]) against
//! what it knows ([`super::known`]), and writes them, each request with a
//! timeout, each pool retried on its own after a failure.
//!
//! Two watches: the node's own slices (`spec.nodeName=<node>`), and, once
//! some pool is for other nodes, the driver's slices without a node name.
//! Of the latter, the ones owned by this node's Node (by name: a restarted
//! driver knows them before it has read the Node's UID) are this driver's.
//! A pool waits only for the watches of the slices it has or will have, so
//! the node's pools sync while the cluster watch cannot list. A pool moved
//! between this node and other nodes has its slices deleted and created
//! again: a slice's `spec.nodeName` cannot change. Slices are written in
//! the version of the API the server serves (v1, or v1beta2), asked first.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::resource::v1::{ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::runtime::watcher;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::Retry;
use nodeplugins_api::timer::sleep_until;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::{PublishError, PublishErrorHandler};
use super::known::{Known, Scope};
use super::plan::{self, Publisher};
use super::pool::{NodeSelection, Pool};
use super::resources::Resources;
use crate::dra_driver::resource_api::ResourceVersions;
use requests::Requests;
use watch::{Watch, WatchEvent, has_listed, next_event};

mod requests;
mod watch;

/// A pool's retries: 100 ms doubling to 30 s, up to a fifth longer at
/// random so that drivers on many nodes do not retry in step.
const RETRY: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(30)).with_jitter(0.2);

/// What the publisher needs.
pub(crate) struct PublishSettings {
    /// The client, and the API version the server serves.
    pub(crate) versions: ResourceVersions,
    pub(crate) node: String,
    pub(crate) driver: String,
    pub(crate) resources: Resources,
    pub(crate) on_error: Option<PublishErrorHandler>,
    /// The driver's handler of every error, given publishing's as
    /// recoverable.
    pub(crate) on_driver_error: Option<crate::dra_driver::DraDriverErrorHandler>,
    /// How long each request may take.
    pub(crate) timeout: Duration,
}

/// Publishes the pools of `settings.resources` until `shutdown`, which
/// stops it at once, even in the middle of a request.
pub(crate) async fn publish(settings: PublishSettings, shutdown: CancellationToken) {
    let mut task = Task::new(settings);
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = task.run() => {}
    }
}

/// Per pool: its retries, and the last pool reported invalid.
#[derive(Default)]
struct PoolState {
    retry: Retry<String>,
    reported_invalid: Option<Pool>,
}

/// A slice as sent and as the server stored it, both normalized: when the
/// server drops fields, the stored form stands for the sent one.
struct Accepted {
    sent: Value,
    stored: Value,
}

struct Task {
    settings: PublishSettings,
    requests: Requests,
    known: Known,
    node_uid: Option<String>,
    pools: BTreeMap<String, PoolState>,
    accepted: BTreeMap<String, Accepted>,
}

/// Which watches have listed: a pool syncs once those of its slices have.
#[derive(Debug, Clone, Copy)]
struct Listed {
    node: bool,
    cluster: bool,
}

impl Listed {
    fn scope(self, scope: Scope) -> bool {
        match scope {
            Scope::Node => self.node,
            Scope::Cluster => self.cluster,
        }
    }
}

/// Which watch the slices of a pool with `selection` are in.
fn scope_of(selection: &NodeSelection) -> Scope {
    match selection {
        NodeSelection::ThisNode => Scope::Node,
        _ => Scope::Cluster,
    }
}

impl Task {
    fn new(mut settings: PublishSettings) -> Self {
        let requests = Requests::new(
            settings.versions.clone(),
            &settings.node,
            settings.timeout,
            settings.resources.clone(),
            settings.on_error.take(),
            settings.on_driver_error.take(),
        );
        Self {
            settings,
            requests,
            known: Known::default(),
            node_uid: None,
            pools: BTreeMap::new(),
            accepted: BTreeMap::new(),
        }
    }

    async fn run(&mut self) {
        // The API's version first, asked until the server answers.
        let mut retry: Retry<String> = Retry::default();
        while let Err(error) = self.requests.discover().await {
            retry.failed(error.to_string(), &RETRY, Instant::now());
            self.requests.report(error);
            sleep_until(retry.due_at()).await;
        }
        let driver = self.settings.driver.clone();
        let mut node_watch = Some(Watch::new(
            &self.requests.slices(),
            Scope::Node,
            &format!("spec.nodeName={},spec.driver={driver}", self.settings.node),
        ));
        let mut cluster_watch: Option<Watch> = None;
        let mut desired = self.settings.resources.subscribe();
        let mut dirty = true;
        loop {
            let wake = self.next_wake(Instant::now());
            tokio::select! {
                event = next_event(&mut node_watch) => {
                    let Some(event) = event else { return };
                    dirty |= self.on_event(node_watch.as_mut(), event);
                }
                event = next_event(&mut cluster_watch) => {
                    let Some(event) = event else { return };
                    dirty |= self.on_event(cluster_watch.as_mut(), event);
                }
                changed = desired.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    dirty = true;
                }
                () = sleep_until(wake) => {
                    self.known.expire(Instant::now());
                    dirty = true;
                }
            }
            if !dirty {
                continue;
            }
            let pools = desired.borrow_and_update().clone();
            let other_nodes = pools
                .values()
                .any(|p| p.node_selection != NodeSelection::ThisNode);
            if other_nodes && cluster_watch.is_none() {
                // Pools for other nodes have no spec.nodeName: they are
                // watched with a selector of their own.
                cluster_watch = Some(Watch::new(
                    &self.requests.slices(),
                    Scope::Cluster,
                    &format!("spec.nodeName=,spec.driver={driver}"),
                ));
            }
            let listed = Listed {
                node: has_listed(node_watch.as_ref()),
                cluster: has_listed(cluster_watch.as_ref()),
            };
            if !listed.node && !listed.cluster {
                continue;
            }
            dirty = false;
            self.sync(&pools, listed).await;
        }
    }

    /// Applies a watch event; whether the pools need a look.
    fn on_event(&mut self, watch: Option<&mut Watch>, event: WatchEvent) -> bool {
        let Some(watch) = watch else {
            return false;
        };
        match event {
            Ok(watcher::Event::Init) => {
                watch.listing.clear();
                false
            }
            Ok(watcher::Event::InitApply(slice)) => {
                watch.listing.push(slice);
                false
            }
            Ok(watcher::Event::InitDone) => {
                let listing = std::mem::take(&mut watch.listing);
                self.known.relisted(watch.scope, listing);
                watch.listed = true;
                true
            }
            Ok(watcher::Event::Apply(slice)) => {
                self.known.seen(watch.scope, slice);
                true
            }
            Ok(watcher::Event::Delete(slice)) => {
                self.known.gone(&slice);
                true
            }
            Err(e) => {
                self.requests.report(PublishError::Watch(e));
                false
            }
        }
    }

    /// The earliest retry or expiry of an own write still to come at
    /// `now`. A retry already due waits for the watches its pool needs
    /// (their listing wakes the task), not for a timer that fires at once.
    fn next_wake(&self, now: Instant) -> Option<Instant> {
        self.pools
            .values()
            .filter_map(|p| p.retry.due_at())
            .filter(|at| *at > now)
            .chain(self.known.next_expiry())
            .min()
    }

    /// Brings every pool that is not waiting for a retry, and whose
    /// watches have listed, in line with `pools`.
    async fn sync(&mut self, pools: &BTreeMap<String, Pool>, listed: Listed) {
        let now = Instant::now();
        let mut by_pool: BTreeMap<String, Vec<ResourceSlice>> = BTreeMap::new();
        let mut scopes: BTreeMap<String, BTreeSet<Scope>> = BTreeMap::new();
        for (scope, slice) in self.known.slices() {
            if scope == Scope::Cluster && !self.owned(&slice) {
                continue;
            }
            let name = slice.spec.pool.name.clone();
            scopes.entry(name.clone()).or_default().insert(scope);
            by_pool.entry(name).or_default().push(slice);
        }
        for (name, pool) in pools {
            let scope = scope_of(&pool.node_selection);
            scopes.entry(name.clone()).or_default().insert(scope);
        }
        let mut all_well = true;
        for (name, needs) in scopes {
            if !needs.iter().all(|scope| listed.scope(*scope)) {
                all_well = false;
                continue;
            }
            let state = self.pools.entry(name.clone()).or_default();
            if state.retry.waiting(now) {
                all_well = false;
                continue;
            }
            let existing = by_pool.remove(&name).unwrap_or_default();
            let result = match pools.get(&name) {
                Some(pool) => self.sync_pool(&name, pool, existing).await,
                None => self.remove_pool(&name, existing).await,
            };
            let state = self.pools.entry(name.clone()).or_default();
            match result {
                Ok(()) => {
                    state.retry.succeeded();
                }
                Err(error) => {
                    state
                        .retry
                        .failed(error.to_string(), &RETRY, Instant::now());
                    let delay = state.retry.due().map(|d| d.delay).unwrap_or_default();
                    tracing::warn!(pool = %name, retry_in = ?delay, "publishing ResourceSlices failed");
                    self.requests.report(error);
                    all_well = false;
                }
            }
        }
        // Forget pools that are neither wanted nor on the server.
        let known: BTreeSet<String> = self
            .known
            .slices()
            .into_iter()
            .map(|(_, s)| s.spec.pool.name)
            .collect();
        self.pools
            .retain(|name, _| pools.contains_key(name) || known.contains(name));
        if all_well {
            self.settings.resources.stats.send_modify(|s| {
                s.last_error = None;
                s.syncs += 1;
            });
        }
    }

    /// Whether `slice`, a slice of this driver without a node name, was
    /// published on this node: its owner is this node's Node, by name (a
    /// restarted driver knows its slices before it has read the Node).
    fn owned(&self, slice: &ResourceSlice) -> bool {
        slice
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Node" && o.name == self.settings.node)
    }

    /// The UID of the node, for the slices' owner reference.
    async fn node_uid(&mut self, pool: &str) -> Result<String, PublishError> {
        if let Some(uid) = &self.node_uid {
            return Ok(uid.clone());
        }
        let uid = self.requests.node_uid(pool).await?;
        self.node_uid = Some(uid.clone());
        Ok(uid)
    }

    async fn sync_pool(
        &mut self,
        name: &str,
        pool: &Pool,
        mut existing: Vec<ResourceSlice>,
    ) -> Result<(), PublishError> {
        let state = self.pools.entry(name.to_string()).or_default();
        if let Err(reason) = pool.validate() {
            let new = state.reported_invalid.as_ref() != Some(pool);
            state.reported_invalid = Some(pool.clone());
            if new {
                self.requests.report(PublishError::InvalidPool {
                    pool: name.to_string(),
                    reason,
                });
            }
            return Ok(());
        }
        state.reported_invalid = None;
        if existing.iter().any(|s| s.spec.node_name.is_none()) {
            // Slices owned by an earlier Node of the same name go: the
            // garbage collector would take them from under the pool.
            let uid = self.node_uid(name).await?;
            let (stale, current): (Vec<_>, Vec<_>) = existing
                .into_iter()
                .partition(|s| owned_by_another(s, &uid));
            for slice in &stale {
                self.delete(name, slice).await?;
            }
            existing = current;
        }
        let driver = self.settings.driver.clone();
        let node = self.settings.node.clone();
        let publisher = Publisher {
            driver: &driver,
            node: &node,
        };
        let accepted = &self.accepted;
        let plan = publisher.plan(name, pool, existing, |slice, _, desired| {
            plan::same_spec(&slice.spec, desired)
                || accepted.get(&slice.name_any()).is_some_and(|a| {
                    a.sent == plan::normalized(desired) && a.stored == plan::normalized(&slice.spec)
                })
        });
        if plan.is_empty() {
            return Ok(());
        }
        for slice in &plan.deletes {
            self.delete(name, slice).await?;
        }
        for (index, current) in plan.updates {
            let mut spec = publisher.spec(name, pool, index, plan.generation);
            plan::copy_taint_times(&current.spec, &mut spec);
            let mut slice = current.clone();
            slice.spec = spec.clone();
            let stored = self.requests.replace(name, &slice).await?;
            tracing::info!(slice = %stored.name_any(), pool = %name, generation = plan.generation, "ResourceSlice updated");
            self.settings
                .resources
                .stats
                .send_modify(|s| s.updates += 1);
            self.stored(name, index, &spec, stored);
        }
        for index in plan.creates {
            let uid = self.node_uid(name).await?;
            let spec = publisher.spec(name, pool, index, plan.generation);
            let slice = ResourceSlice {
                metadata: ObjectMeta {
                    generate_name: Some(publisher.generate_name(index, pool.slices.len())),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node.clone(),
                        uid,
                        controller: Some(true),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: spec.clone(),
            };
            let stored = self.requests.create(name, &slice).await?;
            tracing::info!(slice = %stored.name_any(), pool = %name, generation = plan.generation, "ResourceSlice created");
            self.settings
                .resources
                .stats
                .send_modify(|s| s.creates += 1);
            self.stored(name, index, &spec, stored);
        }
        Ok(())
    }

    /// Deletes every slice of pool `name`, which the driver no longer has.
    async fn remove_pool(
        &mut self,
        name: &str,
        existing: Vec<ResourceSlice>,
    ) -> Result<(), PublishError> {
        for slice in &existing {
            self.delete(name, slice).await?;
        }
        Ok(())
    }

    /// Deletes `slice` of pool `name` if it is still the version seen.
    async fn delete(&mut self, name: &str, slice: &ResourceSlice) -> Result<(), PublishError> {
        if self.requests.delete(name, slice).await? {
            tracing::info!(slice = %slice.name_any(), pool = %name, "ResourceSlice deleted");
            self.settings
                .resources
                .stats
                .send_modify(|s| s.deletes += 1);
        }
        self.accepted.remove(&slice.name_any());
        self.known.deleted(slice, Instant::now());
        Ok(())
    }

    /// Takes note of `stored`, the server's answer to writing `sent` as
    /// slice `index` of pool `name`.
    fn stored(
        &mut self,
        name: &str,
        index: usize,
        sent: &ResourceSliceSpec,
        stored: ResourceSlice,
    ) {
        if !plan::same_spec(&stored.spec, sent) {
            self.requests.report(PublishError::DroppedFields {
                pool: name.to_string(),
                slice: index,
            });
        }
        self.accepted.insert(
            stored.name_any(),
            Accepted {
                sent: plan::normalized(sent),
                stored: plan::normalized(&stored.spec),
            },
        );
        self.known.wrote(stored, Instant::now());
    }
}

/// Whether `slice` is owned by a Node other than the one of UID `uid`.
fn owned_by_another(slice: &ResourceSlice, uid: &str) -> bool {
    slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node" && o.uid != uid)
}

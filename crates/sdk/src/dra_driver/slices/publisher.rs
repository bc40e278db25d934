//! The task that keeps the driver's ResourceSlices equal to its pools: it
//! watches the slices, plans each pool's writes ([`super::plan`]) against
//! what it knows ([`super::known`]), and writes them, each request with a
//! timeout, each pool retried on its own after a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::timer::sleep_until;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::{PublishError, PublishErrorHandler};
use super::known::{Known, Scope};
use super::plan::{self, Publisher};
use super::pool::{NodeSelection, Pool};
use super::resources::Resources;

mod requests;

/// A pool's retries: 100 ms doubling to 30 s, up to a fifth longer at
/// random so that drivers on many nodes do not retry in step.
const RETRY: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(30)).with_jitter(0.2);

/// What the publisher needs.
pub(crate) struct PublishSettings {
    pub(crate) client: kube::Client,
    pub(crate) node: String,
    pub(crate) driver: String,
    pub(crate) resources: Resources,
    pub(crate) on_error: Option<PublishErrorHandler>,
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
    failures: u32,
    retry_at: Option<Instant>,
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
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    known: Known,
    node_uid: Option<String>,
    pools: BTreeMap<String, PoolState>,
    accepted: BTreeMap<String, Accepted>,
}

type Events = BoxStream<'static, Result<watcher::Event<ResourceSlice>, watcher::Error>>;

/// One watch: its events, whether it has listed, and what its listing has
/// gathered so far.
struct Watch {
    scope: Scope,
    events: Events,
    listed: bool,
    listing: Vec<ResourceSlice>,
}

impl Watch {
    fn new(api: &Api<ResourceSlice>, scope: Scope, selector: &str) -> Self {
        let events = watcher(api.clone(), watcher::Config::default().fields(selector))
            .default_backoff()
            .boxed();
        Self {
            scope,
            events,
            listed: false,
            listing: Vec::new(),
        }
    }
}

async fn next_event(
    watch: &mut Option<Watch>,
) -> Option<Result<watcher::Event<ResourceSlice>, watcher::Error>> {
    match watch {
        Some(watch) => watch.events.next().await,
        None => std::future::pending().await,
    }
}

impl Task {
    fn new(settings: PublishSettings) -> Self {
        Self {
            slices: Api::all(settings.client.clone()),
            nodes: Api::all(settings.client.clone()),
            settings,
            known: Known::default(),
            node_uid: None,
            pools: BTreeMap::new(),
            accepted: BTreeMap::new(),
        }
    }

    async fn run(&mut self) {
        let driver = self.settings.driver.clone();
        let mut node_watch = Some(Watch::new(
            &self.slices,
            Scope::Node,
            &format!("spec.nodeName={},spec.driver={driver}", self.settings.node),
        ));
        let mut cluster_watch: Option<Watch> = None;
        let mut desired = self.settings.resources.subscribe();
        let mut dirty = true;
        loop {
            let wake = self.next_wake();
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
            let listed = node_watch.as_ref().is_some_and(|w| w.listed)
                && cluster_watch.as_ref().is_none_or(|w| w.listed);
            if !dirty || !listed {
                continue;
            }
            let pools = desired.borrow_and_update().clone();
            let other_nodes = pools
                .values()
                .any(|p| p.node_selection != NodeSelection::ThisNode);
            if other_nodes && cluster_watch.is_none() {
                // Pools for other nodes have no spec.nodeName: they are
                // watched with a selector of their own, listed first.
                cluster_watch = Some(Watch::new(
                    &self.slices,
                    Scope::Cluster,
                    &format!("spec.nodeName=,spec.driver={driver}"),
                ));
                continue;
            }
            dirty = false;
            self.sync(&pools).await;
        }
    }

    /// Applies a watch event; whether the pools need a look.
    fn on_event(
        &mut self,
        watch: Option<&mut Watch>,
        event: Result<watcher::Event<ResourceSlice>, watcher::Error>,
    ) -> bool {
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
                self.report(PublishError::Watch(e));
                false
            }
        }
    }

    /// The earliest retry or expiry of an own write.
    fn next_wake(&self) -> Option<Instant> {
        self.pools
            .values()
            .filter_map(|p| p.retry_at)
            .chain(self.known.next_expiry())
            .min()
    }

    /// Brings every pool that is not waiting for a retry in line with
    /// `pools`.
    async fn sync(&mut self, pools: &BTreeMap<String, Pool>) {
        let now = Instant::now();
        let mut by_pool: BTreeMap<String, Vec<ResourceSlice>> = BTreeMap::new();
        for (scope, slice) in self.known.slices() {
            if scope == Scope::Cluster && !self.owned(&slice) {
                continue;
            }
            by_pool
                .entry(slice.spec.pool.name.clone())
                .or_default()
                .push(slice);
        }
        let names: BTreeSet<String> = pools.keys().chain(by_pool.keys()).cloned().collect();
        let mut all_well = true;
        for name in names {
            let state = self.pools.entry(name.clone()).or_default();
            if state.retry_at.is_some_and(|at| at > now) {
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
                    state.failures = 0;
                    state.retry_at = None;
                }
                Err(error) => {
                    state.failures = state.failures.saturating_add(1);
                    let delay = RETRY.delay(state.failures);
                    state.retry_at = Some(Instant::now() + delay);
                    tracing::warn!(pool = %name, retry_in = ?delay, "publishing ResourceSlices failed");
                    self.report(error);
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
            self.settings
                .resources
                .stats
                .send_if_modified(|s| s.last_error.take().is_some());
        }
    }

    /// Whether `slice` was published by this driver on this node (pools
    /// for other nodes are owned by this node's Node).
    fn owned(&self, slice: &ResourceSlice) -> bool {
        let Some(uid) = &self.node_uid else {
            return false;
        };
        slice
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Node" && &o.uid == uid)
    }

    async fn sync_pool(
        &mut self,
        name: &str,
        pool: &Pool,
        existing: Vec<ResourceSlice>,
    ) -> Result<(), PublishError> {
        let state = self.pools.entry(name.to_string()).or_default();
        if let Err(reason) = pool.validate() {
            let new = state.reported_invalid.as_ref() != Some(pool);
            state.reported_invalid = Some(pool.clone());
            if new {
                self.report(PublishError::InvalidPool {
                    pool: name.to_string(),
                    reason,
                });
            }
            return Ok(());
        }
        state.reported_invalid = None;
        if pool.node_selection != NodeSelection::ThisNode {
            // Its slices are told apart by their owner.
            self.node_uid(name).await?;
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
            let slice_name = current.name_any();
            let stored = self
                .request(
                    name,
                    "update ResourceSlice",
                    self.slices
                        .replace(&slice_name, &PostParams::default(), &slice),
                )
                .await?;
            tracing::info!(slice = %slice_name, pool = %name, generation = plan.generation, "ResourceSlice updated");
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
            let stored = self
                .request(
                    name,
                    "create ResourceSlice",
                    self.slices.create(&PostParams::default(), &slice),
                )
                .await?;
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
            self.report(PublishError::DroppedFields {
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

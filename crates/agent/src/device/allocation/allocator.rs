//! Who holds which devices: the allocations of devices to containers, and
//! the reservations of allocations in progress. Every decision about them
//! is made here, under the device book's lock (`book.rs`): the plan (what a container
//! holds already, which devices are free, in NUMA-aligned order), the
//! reservation (re-checked: a device another request took meanwhile is
//! replaced), the commit, the release, and the undo of commits whose
//! checkpoint write failed. The caller's side of an allocation, the calls
//! to the plugin, is in `allocate.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::device::allocation::allocate_error::AllocateError;
use crate::device::allocation::allocate_steps::{
    Choice, Chosen, Planned, ReservationId, Reserved, ReservedChoices,
};
use crate::device::allocation::container_allocation::{AllocationRequest, ContainerAllocation};
use crate::device::allocation::selection::{Candidate, aligned_order};
use crate::device::resource::{AllocationKey, Resource, is_healthy, numa_nodes};

/// The resources by name, as the state has them.
pub(crate) type Resources = BTreeMap<String, Resource>;

/// The allocations and reservations of devices.
#[derive(Default)]
pub(crate) struct Allocator {
    /// Shared, so a snapshot for readers costs a reference count each.
    allocations: BTreeMap<AllocationKey, Arc<ContainerAllocation>>,
    /// Devices held by allocations in progress.
    reservations: HashMap<ReservationId, Vec<Reserved>>,
    next_reservation: ReservationId,
}

impl Allocator {
    /// Devices of `resource` held by allocations in progress.
    pub(crate) fn reserved(&self, resource: &str) -> BTreeSet<&String> {
        self.reservations
            .values()
            .flatten()
            .filter(|r| r.resource == resource)
            .flat_map(|r| r.devices.iter())
            .collect()
    }

    /// Healthy devices of `resource` that no container holds or is being given.
    pub(crate) fn free(&self, resources: &Resources, resource: &str) -> Vec<Candidate> {
        let Some(r) = resources.get(resource) else {
            return Vec::new();
        };
        let mut taken = self.reserved(resource);
        taken.extend(
            self.allocations
                .values()
                .filter(|a| a.resource == resource)
                .flat_map(|a| a.devices.iter()),
        );
        r.devices()
            .values()
            .filter(|d| is_healthy(d) && !taken.contains(&d.id))
            .map(|d| Candidate {
                id: d.id.clone(),
                numa: numa_nodes(d),
            })
            .collect()
    }

    /// Step 1: per resource, what the container holds already, or the free
    /// healthy devices in aligned order and the instance to call; any
    /// refusal refuses the request.
    pub(crate) fn plan(
        &self,
        resources: &Resources,
        request: &AllocationRequest,
    ) -> Result<Vec<Planned>, AllocateError> {
        if request.resources.is_empty() {
            return Err(AllocateError::Empty);
        }
        let held = self
            .allocations
            .values()
            .find(|a| a.pod_uid == request.pod_uid && !a.pod_name.is_empty());
        if let Some(held) = held
            && (held.pod_namespace != request.pod_namespace || held.pod_name != request.pod_name)
        {
            return Err(AllocateError::PodRenamed {
                pod: request.pod_uid.clone(),
                known: format!("{}/{}", held.pod_namespace, held.pod_name),
                given: format!("{}/{}", request.pod_namespace, request.pod_name),
            });
        }
        request
            .resources
            .iter()
            .map(|(resource, &count)| self.plan_one(resources, request, resource, count))
            .collect()
    }

    fn plan_one(
        &self,
        resources: &Resources,
        request: &AllocationRequest,
        resource: &str,
        count: usize,
    ) -> Result<Planned, AllocateError> {
        if count == 0 {
            return Err(AllocateError::Zero(resource.into()));
        }
        let key = key(&request.pod_uid, &request.container, resource);
        let r = resources.get(resource);
        if let Some(existing) = self.allocations.get(&key) {
            if existing.devices.len() != count {
                return Err(AllocateError::ChangedRequest {
                    pod: request.pod_uid.clone(),
                    container: request.container.clone(),
                    resource: resource.into(),
                    from: existing.devices.len(),
                    to: count,
                });
            }
            if request.may_be_running {
                return Ok(Planned::Held(ContainerAllocation::clone(existing)));
            }
            let healthy = |id: &String| r.and_then(|r| r.devices().get(id)).is_some_and(is_healthy);
            if !existing.devices.iter().all(healthy) {
                return Err(AllocateError::PreviouslyAllocatedUnhealthy(resource.into()));
            }
            return Ok(Planned::Held(ContainerAllocation::clone(existing)));
        }
        let r = r.ok_or_else(|| AllocateError::Unregistered(resource.into()))?;
        if !r.devices().values().any(is_healthy) {
            return Err(AllocateError::NoHealthy(resource.into()));
        }
        let (_, primary) = r
            .primary()
            .ok_or_else(|| AllocateError::Stopped(resource.into()))?;
        // Devices of earlier init containers first, as the kubelet takes
        // them: they are the pod's already.
        let mut reused: Vec<String> = Vec::new();
        for id in request.reusable.get(resource).into_iter().flatten() {
            if reused.len() < count && !reused.contains(id) {
                reused.push(id.clone());
            }
        }
        let needed = count - reused.len();
        let free = self.free(resources, resource);
        if free.len() < needed {
            return Err(AllocateError::Unavailable {
                resource: resource.into(),
                requested: needed,
                available: free.len(),
            });
        }
        Ok(Planned::Needed {
            resource: resource.into(),
            count,
            reused,
            order: aligned_order(&free, needed),
            plugin: primary.plugin.clone(),
        })
    }

    /// Step 3: reserves every choice, or none. A device taken meanwhile by
    /// another request is replaced by the aligned choice among those left.
    pub(crate) fn reserve(
        &mut self,
        resources: &Resources,
        choices: Vec<Choice>,
    ) -> Result<ReservedChoices, AllocateError> {
        let mut reserved = Vec::with_capacity(choices.len());
        let mut chosen = Vec::with_capacity(choices.len());
        for choice in choices {
            let free = self.free(resources, &choice.resource);
            let ids: BTreeSet<&String> = free.iter().map(|c| &c.id).collect();
            let fresh: Vec<String> = choice
                .devices
                .iter()
                .filter(|id| !choice.reused.contains(id))
                .cloned()
                .collect();
            let count = fresh.len();
            let fresh = if fresh.iter().all(|id| ids.contains(id)) {
                fresh
            } else {
                let again = aligned_order(&free, count);
                if again.len() < count {
                    return Err(AllocateError::Unavailable {
                        resource: choice.resource,
                        requested: count,
                        available: again.len(),
                    });
                }
                again[..count].to_vec()
            };
            let mut devices = choice.reused;
            devices.extend(fresh.iter().cloned());
            // The topology the devices have as they are given out, as the
            // pod-resources API reports it later.
            let known = resources.get(&choice.resource).map(|r| r.devices());
            let numa = devices
                .iter()
                .filter_map(|id| {
                    let nodes = numa_nodes(known?.get(id)?);
                    (!nodes.is_empty()).then(|| (id.clone(), nodes))
                })
                .collect();
            chosen.push(Chosen { devices, numa });
            reserved.push(Reserved {
                resource: choice.resource,
                devices: fresh,
            });
        }
        self.next_reservation += 1;
        let id = self.next_reservation;
        self.reservations.insert(id, reserved);
        Ok((id, chosen))
    }

    /// An allocation in progress failed: its devices are free again. Says
    /// whether it held any.
    pub(crate) fn unreserve(&mut self, reservation: ReservationId) -> bool {
        self.reservations.remove(&reservation).is_some()
    }

    /// Step 5: the reservation becomes allocations; returns them as stored.
    pub(crate) fn commit(
        &mut self,
        reservation: ReservationId,
        allocations: Vec<ContainerAllocation>,
    ) -> Vec<(AllocationKey, Arc<ContainerAllocation>)> {
        self.reservations.remove(&reservation);
        allocations
            .into_iter()
            .map(|a| {
                let key = key(&a.pod_uid, &a.container, &a.resource);
                let a = Arc::new(a);
                self.allocations.insert(key.clone(), a.clone());
                (key, a)
            })
            .collect()
    }

    /// Frees every device pod `pod_uid` holds; returns how many
    /// (container, resource) allocations ended.
    pub(crate) fn release(&mut self, pod_uid: &str) -> usize {
        let before = self.allocations.len();
        self.allocations.retain(|(pod, _, _), _| pod != pod_uid);
        before - self.allocations.len()
    }

    /// Undoes `committed` allocations (whose write failed) that still
    /// stand as they were made; says whether any did.
    pub(crate) fn undo(&mut self, committed: &[(AllocationKey, Arc<ContainerAllocation>)]) -> bool {
        let mut undone = false;
        for (key, allocation) in committed {
            if self
                .allocations
                .get(key)
                .is_some_and(|a| Arc::ptr_eq(a, allocation))
            {
                self.allocations.remove(key);
                undone = true;
            }
        }
        undone
    }

    /// Brings back an allocation the checkpoint holds.
    pub(crate) fn restore(&mut self, allocation: ContainerAllocation) {
        let key = key(
            &allocation.pod_uid,
            &allocation.container,
            &allocation.resource,
        );
        self.allocations.insert(key, Arc::new(allocation));
    }

    /// Every allocation, sorted by pod UID, container and resource.
    pub(crate) fn allocations(&self) -> impl Iterator<Item = &Arc<ContainerAllocation>> {
        self.allocations.values()
    }

    /// How many (container, resource) allocations there are.
    pub(crate) fn len(&self) -> usize {
        self.allocations.len()
    }

    /// Whether any allocation is in progress.
    #[cfg(test)]
    pub(crate) fn reserving(&self) -> bool {
        !self.reservations.is_empty()
    }
}

fn key(pod: &str, container: &str, resource: &str) -> AllocationKey {
    (pod.into(), container.into(), resource.into())
}

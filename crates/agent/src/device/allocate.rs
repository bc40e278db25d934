//! Allocating devices to a container, all or nothing across the resources
//! of one request.
//!
//! The manager's task owns the state; the calls to plugins run outside it,
//! in the caller's task, so a slow plugin holds up nobody else:
//!
//! 1. **plan** (task): per resource, what the container already holds (a
//!    repeated request returns it) or the free healthy devices in NUMA-aligned
//!    order and the primary instance to call; any refusal ends the request.
//! 2. **preferred** (caller): GetPreferredAllocation among all free devices,
//!    when the plugin offers it.
//! 3. **reserve** (task): re-checks that the chosen devices are still free
//!    (choosing again if another request took some) and reserves them.
//! 4. **allocate** (caller): Allocate, then PreStartContainer when the plugin
//!    asks for it, for each resource. Any failure drops the reservation.
//! 5. **commit** (task): records every resource's allocation and answers once
//!    the checkpoint holding them is on disk; a failed write undoes them.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::allocate_error::AllocateError;
use super::allocate_steps::{Choice, Chosen, Planned, ReservationId, Reserved, ReservedChoices};
use super::command::{Command, Shared};
use super::container_allocation::{AllocationRequest, ContainerAllocation};
use super::selection::{Candidate, aligned_order};
use super::state::{AllocationKey, State, is_healthy, numa_nodes};
use crate::owner::Mailbox;

impl State {
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
    pub(crate) fn free(&self, resource: &str) -> Vec<Candidate> {
        let Some(r) = self.resources.get(resource) else {
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

    /// Step 1.
    pub(crate) fn plan(&self, request: &AllocationRequest) -> Result<Vec<Planned>, AllocateError> {
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
            .map(|(resource, &count)| self.plan_one(request, resource, count))
            .collect()
    }

    fn plan_one(
        &self,
        request: &AllocationRequest,
        resource: &str,
        count: usize,
    ) -> Result<Planned, AllocateError> {
        if count == 0 {
            return Err(AllocateError::Zero(resource.into()));
        }
        let key = key(&request.pod_uid, &request.container, resource);
        let r = self.resources.get(resource);
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
        let free = self.free(resource);
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
        choices: Vec<Choice>,
    ) -> Result<ReservedChoices, AllocateError> {
        let mut reserved = Vec::with_capacity(choices.len());
        let mut chosen = Vec::with_capacity(choices.len());
        for choice in choices {
            let free = self.free(&choice.resource);
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
            let known = self.resources.get(&choice.resource).map(|r| r.devices());
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
}

fn key(pod: &str, container: &str, resource: &str) -> AllocationKey {
    (pod.into(), container.into(), resource.into())
}

/// Steps 1 to 5 for `request`, from the caller's task.
pub(crate) async fn allocate(
    commands: &Mailbox<Command>,
    shared: &Shared,
    request: &AllocationRequest,
) -> Result<Vec<ContainerAllocation>, AllocateError> {
    let config = &shared.config;
    let request_copy = request.clone();
    let planned = commands
        .ask(|reply| Command::Plan {
            request: request_copy,
            reply,
        })
        .await
        .unwrap_or(Err(AllocateError::Stopping))?;

    // Ask each plugin for its preference among all free devices, aligned first.
    let mut choices = Vec::new();
    let mut calls = Vec::new();
    for step in &planned {
        let Planned::Needed {
            resource,
            count,
            reused,
            order,
            plugin,
        } = step
        else {
            continue;
        };
        let needed = count - reused.len();
        let mut chosen = reused.clone();
        chosen.extend_from_slice(&order[..needed]);
        if plugin.options().get_preferred_allocation_available && order.len() > needed {
            let mut available = reused.clone();
            available.extend(order.iter().cloned());
            if let Some(preferred) = plugin
                .preferred_allocation(resource, &available, reused, *count, config.options_timeout)
                .await
                .map_err(|source| AllocateError::Preferred {
                    resource: resource.clone(),
                    source,
                })?
            {
                chosen = preferred;
            }
        }
        choices.push(Choice {
            resource: resource.clone(),
            devices: chosen,
            reused: reused.clone(),
        });
        calls.push((resource, plugin));
    }

    let mut allocations = Vec::with_capacity(planned.len());
    if !choices.is_empty() {
        let (reservation, chosen) = Reservation::make(commands, choices).await?;
        for ((resource, plugin), chosen) in calls.into_iter().zip(chosen) {
            let devices = &chosen.devices;
            let response = plugin
                .allocate(resource, devices, config.allocate_timeout, &shared.metrics)
                .await
                .map_err(|source| AllocateError::Rpc {
                    resource: resource.clone(),
                    source,
                })?;
            plugin
                .pre_start_container(devices, config.pre_start_timeout)
                .await
                .map_err(|source| AllocateError::PreStart {
                    resource: resource.clone(),
                    source,
                })?;
            let Chosen { devices, numa } = chosen;
            allocations.push(ContainerAllocation::new(
                request, resource, devices, numa, response,
            ));
        }
        // Only report the allocations once they are on disk.
        reservation.commit(allocations.clone()).await?;
    }
    let mut allocated = allocations.into_iter();
    Ok(planned
        .into_iter()
        .filter_map(|step| match step {
            Planned::Held(held) => Some(held),
            Planned::Needed { .. } => allocated.next(),
        })
        .collect())
}

/// Devices reserved for an allocation in progress. Dropping it frees them;
/// [`commit`](Self::commit) turns them into allocations.
struct Reservation {
    id: ReservationId,
    commands: Mailbox<Command>,
    committed: bool,
}

impl Reservation {
    /// Step 3: reserves the chosen devices; the reservation ends when the
    /// guard is committed or dropped.
    async fn make(
        commands: &Mailbox<Command>,
        choices: Vec<Choice>,
    ) -> Result<(Self, Vec<Chosen>), AllocateError> {
        let (id, chosen) = commands
            .ask(|reply| Command::Reserve { choices, reply })
            .await
            .unwrap_or(Err(AllocateError::Stopping))?;
        let reservation = Self {
            id,
            commands: commands.clone(),
            committed: false,
        };
        Ok((reservation, chosen))
    }

    /// Records `allocations` in place of the reservation and waits until the
    /// checkpoint holding them is on disk; a failed write undoes them.
    async fn commit(mut self, allocations: Vec<ContainerAllocation>) -> Result<(), AllocateError> {
        self.committed = true;
        let (reply, written) = oneshot::channel();
        self.commands
            .send(Command::Commit {
                reservation: self.id,
                allocations,
                reply,
            })
            .map_err(|_| AllocateError::Stopping)?;
        match written.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(AllocateError::Checkpoint(e)),
            Err(_) => Err(AllocateError::Stopping),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.commands.send(Command::Unreserve {
                reservation: self.id,
            });
        }
    }
}

//! Allocating devices to a container, all or nothing across the resources
//! of one request: the caller's side.
//!
//! The manager's task owns the state and decides ([`super::allocator`]);
//! the calls to plugins run outside it, in the caller's task, so a slow
//! plugin holds up nobody else:
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

use tokio::sync::oneshot;

use super::allocate_error::AllocateError;
use super::allocate_steps::{Choice, Chosen, Planned, ReservationId};
use super::command::{Command, Shared};
use super::container_allocation::{AllocationRequest, ContainerAllocation};
use crate::owner::Mailbox;

/// Steps 1 to 5 for `request`, from the caller's task. A failure is told
/// to the owner, which tells operators (as it tells them of allocations
/// and releases).
pub(crate) async fn allocate(
    commands: &Mailbox<Command>,
    shared: &Shared,
    request: &AllocationRequest,
) -> Result<Vec<ContainerAllocation>, AllocateError> {
    let result = steps(commands, shared, request).await;
    if let Err(error) = &result {
        let _ = commands.send(Command::Failed {
            pod: request.pod_uid.clone(),
            container: request.container.clone(),
            error: error.clone(),
        });
    }
    result
}

async fn steps(
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

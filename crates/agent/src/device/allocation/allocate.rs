//! Allocating devices to a container, all or nothing across the resources
//! of one request, in the caller's task.
//!
//! The allocator decides ([`crate::device::allocation::allocator`]), under the device book's
//! lock ([`crate::device::book`]); the calls to plugins run between its decisions,
//! with the lock let go, so a slow plugin holds up nobody else:
//!
//! 1. **plan** (book): per resource, what the container already holds (a
//!    repeated request returns it) or the free healthy devices in NUMA-aligned
//!    order and the primary instance to call; any refusal ends the request.
//! 2. **preferred** (caller): GetPreferredAllocation among all free devices,
//!    when the plugin offers it.
//! 3. **reserve** (book): re-checks that the chosen devices are still free
//!    (choosing again if another request took some) and reserves them.
//! 4. **allocate** (caller): Allocate for each resource, then, for a
//!    container started at once ([`allocate`]), PreStartContainer when the
//!    plugin asks for it. Any failure drops the reservation. The pods owner
//!    allocates at admission without it ([`allocate_recorded`]) and calls
//!    PreStartContainer right before each start of the container
//!    ([`crate::device::allocation::pre_start`]), as the kubelet does.
//! 5. **commit** (book): records every resource's allocation and answers once
//!    the checkpoint holding them is on disk; a failed write undoes them.
//!    [`allocate_recorded`] returns as soon as the allocations are recorded
//!    in the book (any later request sees them), with the write to wait for
//!    apart: a caller that admits one pod at a time lets the next pod go
//!    while the checkpoint is written, so consecutive writes share one.

use std::sync::Arc;

use crate::checkpoint::WriteDone;
use crate::common::owner::Mailbox;
use crate::device::allocation::allocate_error::AllocateError;
use crate::device::allocation::allocate_steps::{Choice, Chosen, Planned, ReservationId};
use crate::device::allocation::container_allocation::{AllocationRequest, ContainerAllocation};
use crate::device::book::DeviceBook;
use crate::device::command::{Command, Shared};
use crate::event::EventKind;

/// Steps 1 to 5 for `request`, from the caller's task. A failure is told
/// to operators (as allocations and releases are).
pub(crate) async fn allocate(
    commands: &Mailbox<Command>,
    shared: &Shared,
    request: &AllocationRequest,
) -> Result<Vec<ContainerAllocation>, AllocateError> {
    let (allocations, on_disk) = recorded(commands, shared, request, PreStart::Call).await?;
    on_disk.written().await?;
    Ok(allocations)
}

/// Whether the allocation calls PreStartContainer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PreStart {
    /// Yes, after Allocate: the container starts at once.
    Call,
    /// No: it is called before each start of the container.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    Later,
}

/// Steps 1 to 5 for `request` without PreStartContainer, returning once
/// the allocations are recorded in the book, with the end of their
/// checkpoint write.
#[cfg(feature = "kube")]
pub(crate) async fn allocate_recorded(
    commands: &Mailbox<Command>,
    shared: &Shared,
    request: &AllocationRequest,
) -> Result<(Vec<ContainerAllocation>, OnDisk), AllocateError> {
    recorded(commands, shared, request, PreStart::Later).await
}

async fn recorded(
    commands: &Mailbox<Command>,
    shared: &Shared,
    request: &AllocationRequest,
    pre_start: PreStart,
) -> Result<(Vec<ContainerAllocation>, OnDisk), AllocateError> {
    let result = steps(commands, shared, request, pre_start).await;
    match result {
        Ok((allocations, written)) => Ok((
            allocations,
            OnDisk {
                written,
                book: shared.book.clone(),
                pod: request.pod_uid.clone(),
                container: request.container.clone(),
            },
        )),
        Err(error) => {
            report(&shared.book, &request.pod_uid, &request.container, &error);
            Err(error)
        }
    }
}

/// Tells operators an allocation failed.
fn report(book: &DeviceBook, pod: &str, container: &str, error: &AllocateError) {
    book.emit(
        EventKind::AllocationFailed,
        error.resource().unwrap_or_default(),
        None,
        Some(format!("pod {pod} container {container}: {error}")),
    );
}

/// The book, once the manager runs and has read its checkpoint; an error
/// once it stopped (or was dropped before it ran).
async fn ready<'a>(
    commands: &Mailbox<Command>,
    shared: &'a Shared,
) -> Result<&'a Arc<DeviceBook>, AllocateError> {
    if commands.is_closed() {
        return Err(AllocateError::Stopping);
    }
    shared
        .store
        .wait_until_ready()
        .await
        .map_err(|_| AllocateError::Stopping)?;
    Ok(&shared.book)
}

/// The end of the checkpoint write that holds an allocation. A failed
/// write undid the allocation.
#[must_use = "an allocation counts once it is on disk"]
pub(crate) struct OnDisk {
    written: Option<WriteDone>,
    book: Arc<DeviceBook>,
    pod: String,
    container: String,
}

impl OnDisk {
    /// Whether the allocation recorded anything new (a plugin was called);
    /// otherwise every device was held already and there is no write.
    #[cfg(feature = "kube")]
    pub(crate) fn is_new(&self) -> bool {
        self.written.is_some()
    }

    /// Waits for the write.
    pub(crate) async fn written(self) -> Result<(), AllocateError> {
        let Some(written) = self.written else {
            return Ok(());
        };
        let result = match written.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(AllocateError::Checkpoint(e)),
            Err(_) => Err(AllocateError::Stopping),
        };
        if let Err(error) = &result {
            report(&self.book, &self.pod, &self.container, error);
        }
        result
    }
}

/// The steps; the allocations, with the end of their write when there was
/// one.
async fn steps(
    commands: &Mailbox<Command>,
    shared: &Shared,
    request: &AllocationRequest,
    pre_start: PreStart,
) -> Result<(Vec<ContainerAllocation>, Option<WriteDone>), AllocateError> {
    let book = ready(commands, shared).await?;
    let planned = book.plan(request)?;

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
                .preferred_allocation(resource, &available, reused, *count)
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
    let mut written = None;
    if !choices.is_empty() {
        let (reservation, chosen) = Reservation::make(book, choices)?;
        for ((resource, plugin), chosen) in calls.into_iter().zip(chosen) {
            let devices = &chosen.devices;
            let response = plugin
                .allocate(resource, devices, &shared.metrics)
                .await
                .map_err(|source| AllocateError::Rpc {
                    resource: resource.clone(),
                    source,
                })?;
            if pre_start == PreStart::Call {
                plugin
                    .pre_start_container(devices)
                    .await
                    .map_err(|source| AllocateError::PreStart {
                        resource: resource.clone(),
                        source,
                    })?;
            }
            let Chosen { devices, numa } = chosen;
            allocations.push(ContainerAllocation::new(
                request, resource, devices, numa, response,
            ));
        }
        // Recorded now; counted once on disk.
        written = Some(reservation.commit(allocations.clone())?);
    }
    let mut allocated = allocations.into_iter();
    let allocations = planned
        .into_iter()
        .filter_map(|step| match step {
            Planned::Held(held) => Some(held),
            Planned::Needed { .. } => allocated.next(),
        })
        .collect();
    Ok((allocations, written))
}

/// Devices reserved for an allocation in progress. Dropping it frees them
/// (even when the caller goes away mid-call); [`commit`](Self::commit)
/// turns them into allocations.
struct Reservation {
    id: ReservationId,
    book: Arc<DeviceBook>,
    committed: bool,
}

impl Reservation {
    /// Step 3: reserves the chosen devices; the reservation ends when the
    /// guard is committed or dropped.
    fn make(
        book: &Arc<DeviceBook>,
        choices: Vec<Choice>,
    ) -> Result<(Self, Vec<Chosen>), AllocateError> {
        let (id, chosen) = book.reserve(choices)?;
        let reservation = Self {
            id,
            book: book.clone(),
            committed: false,
        };
        Ok((reservation, chosen))
    }

    /// Records `allocations` in place of the reservation; returns the end
    /// of the checkpoint write that holds them (a failed write undoes them).
    fn commit(mut self, allocations: Vec<ContainerAllocation>) -> Result<WriteDone, AllocateError> {
        self.committed = true;
        self.book.commit(self.id, allocations)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.committed {
            self.book.unreserve(self.id);
        }
    }
}

//! Allocating a container's devices, as the kubelet's device manager does at
//! admission, and the second phase right before the container starts.
//!
//! | file | what |
//! |---|---|
//! | `allocate` | an allocation's steps in the caller's task: the calls to the plugin |
//! | `allocate_steps`, `allocate_error` | what the steps hand each other; why one failed |
//! | `allocator` | who holds which devices, and every allocation decision |
//! | `selection` | NUMA-aligned choice of devices |
//! | `container_allocation` | what a container asks for and what it was given |
//! | `pre_start` | PreStartContainer, right before a container that holds devices starts |

pub(super) mod allocate;
pub(super) mod allocate_error;
pub(super) mod allocate_steps;
pub(super) mod allocator;
pub(super) mod container_allocation;
pub(super) mod pre_start;
pub(super) mod selection;

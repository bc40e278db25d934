//! A pod's life on the node, from its binding to its end: the watch of the
//! node's pods, the pods owner's loop, and one operation per pod that
//! goes from its admission into its run and from its run's end into its
//! teardown (the kubelet's pod workers and their `SyncPod` /
//! `SyncTerminatingPod` / `SyncTerminatedPod` phases).
//!
//! | file | what |
//! |---|---|
//! | `watch` | the pods bound to the node |
//! | `owner` | the owner task: watch events, operations started |
//! | `tracked` | one pod's state and every decision about it |
//! | `admission_gate` | one pod's devices allocated at a time |
//! | `operation` | one pod's operation: admitted then run, stopped then given back |
//! | `reconcile` | what is held or run for pods no longer followed, found and given back |
//! | `report` | what operations and runtime listings tell the owner on the side |
//! | `static_source` | the static pods followed beside the API's, their mirrors' changes |
//! | `shutdown_requests` | what the node's shutdown asks, and the pods it stops for good |
//! | `node_shutdown` | the owner's answers: pods refused, listed, stopped for good |

#[cfg(feature = "kube")]
pub(super) mod admission_gate;
#[cfg(feature = "kube")]
pub(super) mod node_shutdown;
#[cfg(feature = "kube")]
pub(super) mod operation;
#[cfg(feature = "kube")]
pub(super) mod owner;
#[cfg(feature = "kube")]
pub(super) mod reconcile;
#[cfg(feature = "kube")]
pub(super) mod report;
#[cfg(feature = "kube")]
pub(crate) mod shutdown_requests;
#[cfg(feature = "kube")]
pub(super) mod static_source;
#[cfg(feature = "kube")]
pub(super) mod tracked;
#[cfg(feature = "kube")]
pub(super) mod watch;

//! Running an admitted pod through the container runtime, as the kubelet's
//! `SyncPod` and its runtime manager do: the sandbox, init containers one
//! after another, sidecars and app containers, restarts with the
//! crash-loop back-off, and the runtime's events told to each pod's worker.
//!
//! | file | what |
//! |---|---|
//! | `worker` | one admitted pod's containers run through the runtime (`worker/start`: one container started; `worker/pull`: its image made present) |
//! | `pod_sync` | what a running pod's containers need next, and its phase |
//! | `crash_backoff` | the kubelet's crash-loop back-off |
//! | `restart_rules` | whether a container that exited starts again (`restartPolicyRules`, `restartPolicy`) |
//! | `image_pulls` | the kubelet's image pull back-off |
//! | `probes` | the containers' liveness, readiness and startup probes |
//! | `hooks` | a container's `postStart` and `preStop` hooks |
//! | `lifecycle_metrics` | the hooks' metrics |
//! | `lifecycle_events` | the runtime's container events told to workers |
//! | `resource_health` | the health of what each container holds, in its status |

#[cfg(feature = "kube")]
pub(super) mod crash_backoff;
#[cfg(feature = "kube")]
pub(crate) mod hooks;
#[cfg(feature = "kube")]
pub(super) mod image_pulls;
#[cfg(feature = "kube")]
pub(super) mod lifecycle_events;
#[cfg(feature = "kube")]
pub(crate) mod lifecycle_metrics;
#[cfg(feature = "kube")]
pub(super) mod pod_sync;
#[cfg(feature = "kube")]
pub(super) mod probes;
#[cfg(feature = "kube")]
pub(super) mod resource_health;
#[cfg(feature = "kube")]
pub(super) mod restart_rules;
#[cfg(feature = "kube")]
pub(super) mod worker;

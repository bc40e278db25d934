//! The pod-resources API (`v1.PodResourcesLister`, and `v1alpha1` beside it
//! as the kubelet serves both) on `<root>/pod-resources/kubelet.sock`: what
//! monitoring and topology agents (GPU exporters, NUMA-aware scheduling
//! exporters) read to learn which devices each container holds.
//!
//! Pods are those the agent knows: from device allocations (which carry the
//! pod's namespace and name since they were added) and from DRA claims
//! prepared for a named pod. Both come from the managers' checkpoints after
//! a restart, so the answers do too. The socket is mode 0600 in a 0700
//! directory unless configured otherwise, rate-limited as the kubelet's
//! (100 calls a second, bursts of 10), and served again when removed.
//!
//! | file | what |
//! |---|---|
//! | `config` | socket, mode, rate limit |
//! | `convert` | the kubelet's `v1` and `v1alpha1` shapes of devices and claims |
//! | `view` | each pod's answer encoded once, `List` and `Get` made of them |
//! | `views` | the task that builds the views after every change and publishes them |
//! | `server` | the gRPC services on the socket |
//! | `codec` | requests decoded, answers sent as the view's bytes |
//! | `metrics` | the kubelet's request counters and ours |

mod codec;
mod config;
mod convert;
#[cfg(test)]
mod fixtures;
mod metrics;
mod server;
mod view;
mod views;

pub use config::{PodResourcesConfig, RateLimit};
pub use metrics::PodResourcesMetrics;
pub use server::serve;

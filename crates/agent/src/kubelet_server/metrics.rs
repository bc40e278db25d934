//! The metrics the kubelet's port serves, each in the Prometheus text
//! format with the kubelet's content type.
//!
//! | file | what |
//! |---|---|
//! | `agent_metrics` | `/metrics`: the agent's own metrics; `/metrics/probes` |
//! | `resource_metrics` | `/metrics/resource`: what the metrics server scrapes |
//! | `node_usage` | the node's CPU time and working set from its root cgroup |

pub(super) mod agent_metrics;
mod node_usage;
pub(super) mod resource_metrics;

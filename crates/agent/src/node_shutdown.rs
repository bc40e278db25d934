//! Graceful node shutdown, as the kubelet's: when systemd is about to shut
//! the node down, logind tells the agent (`PrepareForShutdown`) and waits
//! while the agent holds its inhibitor lock; the agent marks the Node not
//! ready, refuses new pods and stops the running ones, lowest priority
//! first, within the configured grace periods, each with the status the
//! kubelet gives a pod stopped so (`Failed`, reason `Terminated`, a
//! `DisruptionTarget` condition). Off unless a grace period is configured
//! (feature `kube`).
//!
//! | file | what |
//! |---|---|
//! | `config` | the grace periods and the priority groups they make |
//! | `logind` | what is asked of logind over the system bus |
//! | `manager` | the task: the lock, the signal, the pods stopped |

mod config;
mod logind;
mod manager;

pub use config::{
    LOGIND_CONFIG_DIR, NodeShutdownConfig, PriorityGracePeriod, SYSTEM_CRITICAL_PRIORITY,
};
pub use manager::NodeShutdownManager;

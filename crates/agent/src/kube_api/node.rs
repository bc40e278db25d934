//! The Node's status (device capacity and allocatable, and the volumes in
//! use) as the kubelet's node status manager writes them, the node's
//! Lease as its lease controller renews it, and, when the agent is the
//! node's kubelet, the Node registered and the rest of its status kept.
//!
//! | file | what |
//! |---|---|
//! | `node_status` | the devices' and volumes' status the Node should have, and its patch |
//! | `node_status_writer` | the task that writes it |
//! | `volumes_in_use` | the volume manager's volumes in use, for the writer |
//! | `lease` | the node's Lease in `kube-node-lease`, renewed every 10 s |
//! | `registration` | how the node is registered: the Node made, or reconciled |
//! | `machine` | the machine's CPUs, memory, huge pages, disk, identities |
//! | `addresses` | the Node's addresses |
//! | `runtime_state` | the runtime's readiness, asked every 5 s |
//! | `kubelet_status` | the kubelet's part of the status: capacity, `nodeInfo`, conditions |
//! | `kubelet_node` | the task that registers and writes it |

mod addresses;
pub(super) mod kubelet_node;
pub(super) mod kubelet_status;
pub(super) mod lease;
mod machine;
pub(super) mod node_status;
pub(super) mod node_status_writer;
pub(super) mod registration;
pub(super) mod runtime_state;
pub(crate) mod volumes_in_use;

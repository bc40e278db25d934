//! The Node's status (device capacity and allocatable, and the volumes in
//! use) as the kubelet's node status manager writes them, and the node's
//! Lease as its lease controller renews it.
//!
//! | file | what |
//! |---|---|
//! | `node_status` | the status the Node should have, and its patch |
//! | `node_status_writer` | the task that writes it |
//! | `volumes_in_use` | the volume manager's volumes in use, for the writer |
//! | `lease` | the node's Lease in `kube-node-lease`, renewed every 10 s |

pub(super) mod lease;
pub(super) mod node_status;
pub(super) mod node_status_writer;
pub(crate) mod volumes_in_use;

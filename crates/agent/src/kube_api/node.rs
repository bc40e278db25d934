//! The Node's status: device capacity and allocatable, as the kubelet's
//! node status manager writes them.
//!
//! | file | what |
//! |---|---|
//! | `node_status` | the status the Node should have, and its patch |
//! | `node_status_writer` | the task that writes it |

pub(super) mod node_status;
pub(super) mod node_status_writer;

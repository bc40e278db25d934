//! The node's CSI drivers on its Node (annotation, topology labels) and its
//! CSINode, as the kubelet's CSI plugin writes them.
//!
//! | file | what |
//! |---|---|
//! | `csi_node` | the CSINode and Node changes for the registered drivers |
//! | `csi_node_writer` | the task that writes them |

pub(super) mod csi_node;
pub(super) mod csi_node_writer;

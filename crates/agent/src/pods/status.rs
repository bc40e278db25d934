//! A pod's status as the kubelet writes it to the API, and the writes
//! themselves (a deleted pod deleted for good at its end).
//!
//! | file | what |
//! |---|---|
//! | `api_status` | the pod's status as the kubelet writes it |
//! | `status_writer` | the pod's status written, a deleted pod deleted |

#[cfg(feature = "kube")]
pub(super) mod api_status;
#[cfg(feature = "kube")]
pub(super) mod status_writer;

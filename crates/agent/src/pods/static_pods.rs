//! Static pods: the pods the node runs from its own files (the kubelet's
//! `staticPodPath`), with or without an API server, and their mirror pods
//! in the API, through which the cluster sees them.
//!
//! | file | what |
//! |---|---|
//! | `manifest` | the static pod path read, each manifest a defaulted pod or refused |
//! | `api_defaults` | the defaults the API gives a `v1` Pod |
//! | `validation` | what of a pod the kubelet checks before it runs it |
//! | `references` | the API objects a static pod may not name |
//! | `source` | the path followed: read again on inotify and every check period |
//! | `mirror` | the static pods' mirror pods in the API, made, replaced, deleted |

pub(super) mod api_defaults;
pub(crate) mod manifest;
pub(crate) mod mirror;
pub(super) mod references;
pub(crate) mod source;
pub(super) mod validation;

#[cfg(test)]
mod tests;

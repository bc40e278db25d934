//! What the runtime is given for a pod and each of its containers, as the
//! kubelet's `GenerateRunContainerOptions` and its runtime manager's
//! sandbox and container configs make it.
//!
//! | file | what |
//! |---|---|
//! | `generate` | what a container is given, assembled in one place |
//! | `options` | a container's run options, as the kubelet's `RunContainerOptions` |
//! | `env` | a container's environment, as the kubelet makes it |
//! | `env_sources` | the ConfigMaps and Secrets a container's environment names, read |
//! | `env_file` | a variable read from a file in one of the pod's volumes (`fileKeyRef`) |
//! | `expand` | `$(NAME)` references expanded, as the kubelet expands them |
//! | `runtime_spec` | what the runtime is asked for a pod and a container |
//! | `linux_resources` | a container's cgroup resources, as the kubelet sets them |
//! | `security_context` | a pod's and a container's security context, as the kubelet hands it to the runtime |
//! | `service_env` | the Services' variables every container gets |
//! | `host_dns` | the node's resolver file, read as the kubelet reads it |
//! | `pod_dns` | a pod's resolver settings, as the kubelet's DNS configurer makes them |
//! | `pod_files` | a pod's hosts file and termination logs |

#[cfg(feature = "kube")]
pub(super) mod env;
#[cfg(feature = "kube")]
pub(super) mod env_file;
#[cfg(feature = "kube")]
pub(super) mod env_sources;
#[cfg(feature = "kube")]
pub(super) mod expand;
#[cfg(feature = "kube")]
pub(super) mod generate;
#[cfg(feature = "kube")]
pub(super) mod host_dns;
#[cfg(feature = "kube")]
pub(super) mod linux_resources;
#[cfg(feature = "kube")]
pub(super) mod options;
#[cfg(feature = "kube")]
pub(crate) mod pod_dns;
#[cfg(feature = "kube")]
pub(super) mod pod_files;
#[cfg(feature = "kube")]
pub(super) mod runtime_spec;
#[cfg(feature = "kube")]
pub(super) mod security_context;
#[cfg(feature = "kube")]
pub(super) mod service_env;

//! The node side of the kubelet's plugin system.
//!
//! - [`plugin_manager`]: the plugin manager. It watches `<root>/plugins_registry`
//!   (inotify, recursive), speaks the `pluginregistration` v1 protocol with
//!   every plugin socket, and hands plugins to a [`PluginHandler`] by type.
//! - [`PluginHandler`]: the trait embedders implement for their own plugin
//!   types.
//! - [`csi`]: the CSI handler (version rules, driver store, NodeGetInfo).
//! - [`device`]: the device manager (device plugins, allocation, checkpoint).
//! - [`dra`]: DRA drivers: instances, connection monitoring, cleanup,
//!   prepare and unprepare, device health.
//! - [`metrics`]: Prometheus metrics, `/healthz` and `/readyz` over HTTP.
//! - [`admin`]: the operator socket the `nodeplugins` CLI reads status from.
//! - [`event`]: what every subsystem tells operators happened.
//! - [`kube_api`] (feature `kube`): what the kubelet writes to the
//!   Kubernetes API for its plugins.
//! - [`pod_resources`]: the kubelet's pod-resources API.
//! - [`pods`] (feature `kube`): the node's pods, served from the API:
//!   devices allocated and claims prepared when a pod comes, given back
//!   when it goes.
//! - [`runtime`]: the container runtime pods run on: CRI v1 (containerd)
//!   through one call-policy layer, or a simulated runtime.
//! - [`fs_watch`]: the one inotify instance an agent's waits on files share.
//! - [`agent`]: the wiring `nodeplugins run` uses.
//!
//! `docs/embedding.md` describes every public item.
#![forbid(unsafe_code)]

pub mod admin;
pub mod agent;
mod checkpoint;
mod common;
pub mod csi;
pub mod device;
pub mod dra;
pub mod event;
pub mod fs_watch;
#[cfg(feature = "kube")]
pub mod kube_api;
#[cfg(feature = "kubelet-server")]
pub mod kubelet_server;
pub mod metrics;
#[cfg(feature = "kube")]
pub mod node_shutdown;
mod plugin_description;
pub mod plugin_manager;
pub mod pod_resources;
pub mod pods;
pub mod published;
pub mod runtime;
#[cfg(feature = "kube")]
pub mod volumes;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

pub use plugin_manager::handler::{HandlerError, PluginHandler};
pub use plugin_manager::{PluginManager, PluginManagerConfig};
/// The metrics library the agent registers its families with
/// ([`metrics::MetricsSource`]): the same version, for an application that
/// serves the agent's metrics from its own registry.
pub use prometheus_client;

//! The plugin side of the kubelet's plugin system.
//!
//! Every server here starts the same way: a builder with the kubelet's
//! defaults, then `start(shutdown)`, which returns a handle once the server
//! is up; the handle's `wait()` ends after `shutdown` fires and the server's
//! sockets are removed.
//!
//! - [`registrar`]: serve `pluginregistration.Registration` for a plugin
//!   ([`Registrar::builder`]), with socket hygiene, per-instance names for
//!   rolling updates, and the kubelet's verdict on a watch channel.
//! - [`device_plugin`]: serve a device plugin and keep it registered across
//!   kubelet restarts ([`device_plugin::DevicePluginServer::builder`]).
//! - [`dra_driver`]: serve a DRA driver: v1 and v1beta1, device health,
//!   rolling updates ([`dra_driver::DraDriverServer::builder`]).
//! - [`csi_registrar`]: a replacement for the node-driver-registrar sidecar
//!   ([`csi_registrar::CsiRegistrar::builder`]).
//! - [`csi_driver`]: a small CSI node driver server (registration, and
//!   volumes as bind mounts, staged and published, with their stats).
//! - [`cdi`]: what a container gets for a device, written as the CDI spec
//!   files the container runtime reads (by the DRA driver server for its
//!   prepared claims, and by the device plugin server for its devices).
//! - [`socket_name`]: registration socket names.
//! - [`signals`]: stop on SIGTERM/SIGINT.
//! - `logging` (feature `logging`): log setup for plugin binaries.
//!
//! The `nodeplugins-sdk-bins` package holds programs built on it: the
//! `nodeplugins-csi-registrar` binary and the example plugins.
//!
//! Every server here goes through [`nodeplugins_api::transport`], which
//! accepts the path-valued `:authority` the real kubelet sends.
#![forbid(unsafe_code)]

mod call_span;
pub mod cdi;
pub mod csi_driver;
pub mod csi_registrar;
pub mod device_plugin;
pub mod dra_driver;
#[cfg(feature = "logging")]
pub mod logging;
pub mod registrar;
pub mod signals;
pub mod socket_name;

/// The attribute a [`dra_driver::DraDriver`] (and any other trait of the
/// SDK with async methods) is implemented with: `#[nodeplugins_sdk::async_trait]`.
pub use async_trait::async_trait;
/// The Kubernetes types the DRA driver's cluster options take (feature
/// `kube`), at the versions the SDK is built with.
#[cfg(feature = "kube")]
pub use k8s_openapi;
/// The Kubernetes client the DRA driver's cluster options take (feature
/// `kube`).
#[cfg(feature = "kube")]
pub use kube;
pub use nodeplugins_api as api;
pub use registrar::{PluginRegistration, Registrar, RegistrarBuilder, RegistrationState};
/// The token every server's `start` takes and stops on.
pub use tokio_util::sync::CancellationToken;
/// The gRPC crate whose `Status` the device plugin traits return, at the
/// version the SDK is built with.
pub use tonic;

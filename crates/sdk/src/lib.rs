//! The plugin side of the kubelet's plugin system.
//!
//! - [`registrar`]: serve `pluginregistration.Registration` for a plugin,
//!   with socket hygiene, per-instance names for rolling updates, and the
//!   kubelet's verdict on a watch channel.
//! - [`socket_name`]: registration socket names.
//! - [`csi_driver`]: a minimal CSI node driver server.
//! - [`csi_registrar`]: a replacement for the node-driver-registrar sidecar,
//!   also shipped as the `nodeplugins-csi-registrar` binary.
//! - [`device_plugin`]: serve a device plugin and keep it registered across
//!   kubelet restarts; also the `example-device-plugin` binary.
//! - [`dra_driver`]: serve a DRA driver (v1 and v1beta1, device health,
//!   rolling updates); also the `example-dra-driver` binary.
//! - [`signals`]: stop on SIGTERM/SIGINT.
//!
//! Every server here goes through [`nodeplugins_api::transport`], which
//! accepts the path-valued `:authority` the real kubelet sends.
#![forbid(unsafe_code)]

pub mod csi_driver;
pub mod csi_registrar;
pub mod device_plugin;
pub mod dra_driver;
pub mod registrar;
pub mod signals;
pub mod socket_name;

pub use nodeplugins_api as api;
pub use registrar::{PluginRegistration, Registrar, RegistrarBuilder, RegistrationState};

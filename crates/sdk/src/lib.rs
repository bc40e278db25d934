//! The plugin side of the kubelet's plugin system.
//!
//! This crate is where the plugin SDK lives: a registrar serving
//! `pluginregistration.Registration` with correct socket hygiene and
//! rolling-update socket names, a device plugin server, a DRA driver server,
//! and a CSI registrar replacing node-driver-registrar. None of these exist
//! yet; today plugin authors use [`nodeplugins_api`] directly (its transport
//! already accepts the path-valued `:authority` the real kubelet sends).
#![forbid(unsafe_code)]

pub use nodeplugins_api as api;

//! A container's run options, the kubelet's `RunContainerOptions`: what
//! `generate` assembles and `runtime_spec` makes the container's spec from.

use std::collections::BTreeMap;

use crate::runtime::{DeviceNodeSpec, MountSpec};

/// A container's run options (the kubelet's `RunContainerOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunContainerOptions {
    /// Environment variables, in order; a later one of a name wins.
    pub(crate) envs: Vec<(String, String)>,
    /// Host paths mounted into it.
    pub(crate) mounts: Vec<MountSpec>,
    /// Device nodes made available in it.
    pub(crate) devices: Vec<DeviceNodeSpec>,
    /// CDI devices: the claims' first, then the device plugins'.
    pub(crate) cdi_devices: Vec<String>,
    /// The device plugins' annotations.
    pub(crate) annotations: BTreeMap<String, String>,
}

//! Names and values fixed by the upstream APIs and the kubelet's layout.

/// Plugin types a plugin reports in `PluginInfo.type`.
pub mod plugin_type {
    /// A CSI node driver.
    pub const CSI: &str = "CSIPlugin";
    /// A device plugin registering through `plugins_registry`.
    pub const DEVICE: &str = "DevicePlugin";
    /// A Dynamic Resource Allocation driver.
    pub const DRA: &str = "DRAPlugin";
}

/// Directory layout under the kubelet root directory.
pub mod layout {
    /// The kubelet's default root directory.
    pub const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet";
    /// Watched for plugin registration sockets.
    pub const PLUGINS_REGISTRY_DIR: &str = "plugins_registry";
    /// Per-plugin data directories (DRA service sockets live under `plugins/<driver>/`).
    pub const PLUGINS_DIR: &str = "plugins";
    /// Device plugin sockets, `kubelet.sock` and the device checkpoint.
    pub const DEVICE_PLUGINS_DIR: &str = "device-plugins";
    /// The device plugin registration socket the agent serves.
    pub const KUBELET_SOCKET: &str = "kubelet.sock";
    /// The kubelet's device manager checkpoint file name.
    pub const DEVICE_CHECKPOINT: &str = "kubelet_internal_checkpoint";
}

/// Device plugin API constants (`deviceplugin/v1beta1/constants.go`).
pub mod device_plugin {
    /// The only device plugin API version.
    pub const VERSION: &str = "v1beta1";
    /// Versions the agent supports.
    pub const SUPPORTED_VERSIONS: &[&str] = &[VERSION];
    /// A device that can be allocated.
    pub const HEALTHY: &str = "Healthy";
    /// A device that cannot be allocated.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// PreStartContainer timeout, in seconds.
    pub const PRE_START_CONTAINER_TIMEOUT_SECS: u64 = 30;
}

/// DRA service names advertised in `PluginInfo.supported_versions`.
pub mod dra_service {
    /// `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`.
    pub const V1: &str = "v1.DRAPlugin";
    /// `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`.
    pub const V1BETA1: &str = "v1beta1.DRAPlugin";
    /// Device health, v1alpha1.
    pub const HEALTH_V1ALPHA1: &str = "v1alpha1.DRAResourceHealth";
    /// Device health, v1.
    pub const HEALTH_V1: &str = "v1.DRAResourceHealth";
}

/// The pod-resources API.
pub mod pod_resources {
    /// The socket's directory under the root directory.
    pub const DIR: &str = "pod-resources";
    /// The socket's name in that directory.
    pub const SOCKET: &str = "kubelet.sock";
    /// Calls per second the kubelet allows on the socket, all methods and
    /// clients together.
    pub const DEFAULT_QPS: u32 = 100;
    /// Calls the kubelet allows at once above that rate.
    pub const DEFAULT_BURST: u32 = 10;
    /// The message of the `ResourceExhausted` status a call over the limit gets.
    pub const RATE_LIMITED: &str = "rejected by rate limit";
}

/// The version node-driver-registrar (and our CSI registrar) advertises for CSI.
pub const CSI_REGISTRATION_VERSION: &str = "1.0.0";

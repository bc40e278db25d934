//! The agent's parts the admin socket answers from: it reads their
//! status and events, and hands operators' requests (allocate, release,
//! prepare, unprepare) to the part that decides them.

use std::path::PathBuf;

use super::metrics::AdminMetrics;

/// The parts the admin socket reads and asks.
#[derive(Clone)]
pub(crate) struct AdminParts {
    /// The plugin manager.
    pub plugins: crate::plugin_manager::PluginManagerHandle,
    /// The CSI handler's drivers.
    pub csi: crate::csi::CsiDriverStore,
    /// The device manager.
    pub devices: crate::device::DeviceHandle,
    /// The DRA manager.
    pub dra: crate::dra::DraHandle,
    /// Where metrics are served, if anywhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The admin socket's own metrics.
    pub admin: AdminMetrics,
    /// The pod-resources socket, if served.
    pub pod_resources_socket: Option<PathBuf>,
    /// The pod-resources server's metrics.
    pub pod_resources: crate::pod_resources::PodResourcesMetrics,
    /// The Kubernetes API publisher, when the agent has one.
    #[cfg(feature = "kube")]
    pub kube: Option<crate::kube_api::KubeApiHandle>,
    /// The pods owner, when the agent has an API server.
    #[cfg(feature = "kube")]
    pub pods: Option<crate::pods::PodsHandle>,
}

impl AdminParts {
    /// Whether the node's pods are served from the API: then devices and
    /// claims follow the pods, and nothing is allocated or prepared by
    /// hand.
    pub(crate) fn serving_pods(&self) -> bool {
        #[cfg(feature = "kube")]
        if let Some(pods) = &self.pods {
            return pods.serving();
        }
        false
    }
}

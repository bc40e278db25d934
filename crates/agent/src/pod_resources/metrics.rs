//! What the pod-resources server counts: the kubelet's own
//! `kubelet_pod_resources_endpoint_*` families (a call refused by the rate
//! limit is not counted there, as upstream), plus calls refused by the rate
//! limit and re-creations of the socket.

use crate::metrics::{CounterVec, MetricsSource};

/// The pod-resources server's metrics. Cheap to clone.
#[derive(Clone)]
pub struct PodResourcesMetrics {
    requests: CounterVec,
    list: CounterVec,
    get_allocatable: CounterVec,
    get: CounterVec,
    get_errors: CounterVec,
    rate_limited: CounterVec,
    recreations: CounterVec,
}

impl Default for PodResourcesMetrics {
    fn default() -> Self {
        const VERSION: &[&str] = &["server_api_version"];
        Self {
            requests: CounterVec::new(
                "kubelet_pod_resources_endpoint_requests_total",
                "Cumulative number of requests to the PodResource endpoint. Broken down by server api version.",
                VERSION,
            ),
            list: CounterVec::new(
                "kubelet_pod_resources_endpoint_requests_list",
                "Number of requests to the PodResource List endpoint. Broken down by server api version.",
                VERSION,
            ),
            get_allocatable: CounterVec::new(
                "kubelet_pod_resources_endpoint_requests_get_allocatable",
                "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.",
                VERSION,
            ),
            get: CounterVec::new(
                "kubelet_pod_resources_endpoint_requests_get",
                "Number of requests to the PodResource Get endpoint. Broken down by server api version.",
                VERSION,
            ),
            get_errors: CounterVec::new(
                "kubelet_pod_resources_endpoint_errors_get",
                "Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.",
                VERSION,
            ),
            rate_limited: CounterVec::new(
                "nodeplugins_pod_resources_rate_limited_total",
                "Calls to the pod-resources socket refused by its rate limit.",
                &[],
            ),
            recreations: CounterVec::new(
                "nodeplugins_pod_resources_socket_recreations_total",
                "Times the pod-resources socket was removed while the agent ran and served again.",
                &[],
            ),
        }
    }
}

/// A pod-resources method, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    List,
    GetAllocatable,
    Get,
}

impl PodResourcesMetrics {
    pub(crate) fn request(&self, version: &str, method: Method) {
        self.requests.inc(&[version]);
        match method {
            Method::List => self.list.inc(&[version]),
            Method::GetAllocatable => self.get_allocatable.inc(&[version]),
            Method::Get => self.get.inc(&[version]),
        }
    }

    pub(crate) fn get_failed(&self, version: &str) {
        self.get_errors.inc(&[version]);
    }

    pub(crate) fn rate_limited(&self) {
        self.rate_limited.inc(&[]);
    }

    pub(crate) fn socket_recreated(&self) {
        self.recreations.inc(&[]);
    }

    /// How many times the socket was served again after being removed.
    pub fn socket_recreations(&self) -> u64 {
        self.recreations.get(&[])
    }

    /// How many calls the rate limit refused.
    pub fn rate_limited_calls(&self) -> u64 {
        self.rate_limited.get(&[])
    }
}

#[async_trait::async_trait]
impl MetricsSource for PodResourcesMetrics {
    async fn render(&self, out: &mut String) {
        for family in [
            &self.requests,
            &self.list,
            &self.get_allocatable,
            &self.get,
            &self.get_errors,
            &self.rate_limited,
            &self.recreations,
        ] {
            family.render(out);
        }
    }
}

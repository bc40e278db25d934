//! What the pod-resources server counts: the kubelet's own
//! `kubelet_pod_resources_endpoint_*` families, with its names, help and
//! `server_api_version` label, plus calls refused by the rate limit and
//! re-creations of the socket.
//!
//! Counted as upstream counts them: every call admitted past the rate limit
//! in `requests_total`; `v1` calls also per method (upstream's `v1alpha1`
//! `List` counts in `requests_total` alone); a `v1` call that fails in its
//! method's `errors_*` family. Upstream fails only `Get` (an unknown pod)
//! and never increments `errors_list` or `errors_get_allocatable`, though it
//! registers them; ours also fail when the agent is stopping, and are
//! counted there. A call refused by the rate limit is refused before the
//! service, so upstream counts it in no family; we count it in our own.

use crate::metrics::{CounterVec, MetricsSource};

/// The pod-resources server's metrics. Cheap to clone.
#[derive(Clone)]
pub struct PodResourcesMetrics {
    requests: CounterVec,
    list: CounterVec,
    get_allocatable: CounterVec,
    get: CounterVec,
    list_errors: CounterVec,
    get_allocatable_errors: CounterVec,
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
            list_errors: CounterVec::new(
                "kubelet_pod_resources_endpoint_errors_list",
                "Number of requests to the PodResource List endpoint which returned error. Broken down by server api version.",
                VERSION,
            ),
            get_allocatable_errors: CounterVec::new(
                "kubelet_pod_resources_endpoint_errors_get_allocatable",
                "Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version.",
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
    /// `v1` `List`.
    List,
    /// `v1` `GetAllocatableResources`.
    GetAllocatable,
    /// `v1` `Get`.
    Get,
    /// `v1alpha1` `List`.
    ListV1alpha1,
}

impl Method {
    /// The `server_api_version` label of its calls.
    fn version(self) -> &'static str {
        match self {
            Self::List | Self::GetAllocatable | Self::Get => "v1",
            Self::ListV1alpha1 => "v1alpha1",
        }
    }
}

impl PodResourcesMetrics {
    /// A call to `method` passed the rate limit.
    pub(crate) fn request(&self, method: Method) {
        let version = method.version();
        self.requests.inc(&[version]);
        match method {
            Method::List => self.list.inc(&[version]),
            Method::GetAllocatable => self.get_allocatable.inc(&[version]),
            Method::Get => self.get.inc(&[version]),
            Method::ListV1alpha1 => {}
        }
    }

    /// A call to `method` that passed the rate limit answered with an error.
    pub(crate) fn failed(&self, method: Method) {
        let version = method.version();
        match method {
            Method::List => self.list_errors.inc(&[version]),
            Method::GetAllocatable => self.get_allocatable_errors.inc(&[version]),
            Method::Get => self.get_errors.inc(&[version]),
            Method::ListV1alpha1 => {}
        }
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
}

impl MetricsSource for PodResourcesMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        for family in [
            &self.requests,
            &self.list,
            &self.get_allocatable,
            &self.list_errors,
            &self.get_allocatable_errors,
            &self.get,
            &self.get_errors,
            &self.rate_limited,
            &self.recreations,
        ] {
            family.register(registry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn rendered(metrics: &PodResourcesMetrics) -> String {
        crate::metrics::encoded(metrics)
    }

    #[tokio::test]
    async fn calls_and_errors_are_counted_in_the_kubelets_families() {
        let metrics = PodResourcesMetrics::default();
        for method in [
            Method::List,
            Method::GetAllocatable,
            Method::Get,
            Method::ListV1alpha1,
        ] {
            metrics.request(method);
            metrics.failed(method);
        }
        let text = rendered(&metrics).await;
        for line in [
            r#"kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"} 3"#,
            r#"kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"} 1"#,
            r#"kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"} 1"#,
            r#"kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version="v1"} 1"#,
            r#"kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"} 1"#,
            r#"kubelet_pod_resources_endpoint_errors_list{server_api_version="v1"} 1"#,
            r#"kubelet_pod_resources_endpoint_errors_get_allocatable{server_api_version="v1"} 1"#,
            r#"kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(
            !text.contains(r#"requests_list{server_api_version="v1alpha1"}"#),
            "upstream counts v1alpha1 List in requests_total only:\n{text}"
        );
        assert!(!text.contains(r#"errors_list{server_api_version="v1alpha1"}"#));
    }
}

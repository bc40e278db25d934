//! The DRA manager's metrics, with the kubelet's names.

use std::time::Duration;

use crate::metrics::{DEFAULT_BUCKETS, HistogramVec, MetricsSource, grpc_code_name};
use nodeplugins_api::dra_client::DraService;

/// `dra_operations_duration_seconds` and `dra_grpc_operations_duration_seconds`.
/// Cheap to clone.
#[derive(Clone)]
pub struct DraMetrics {
    operations: HistogramVec,
    grpc_operations: HistogramVec,
}

impl Default for DraMetrics {
    fn default() -> Self {
        Self {
            operations: HistogramVec::new(
                "dra_operations_duration_seconds",
                "Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops.",
                &["operation_name", "is_error"],
                DEFAULT_BUCKETS,
            ),
            grpc_operations: HistogramVec::new(
                "dra_grpc_operations_duration_seconds",
                "Duration in seconds of the DRA gRPC operations.",
                &["driver_name", "method_name", "grpc_status_code"],
                DEFAULT_BUCKETS,
            ),
        }
    }
}

impl DraMetrics {
    /// Records one call: `operation` is the kubelet's name (the RPC's name
    /// without "Node"), `failed` whether the call or any claim failed.
    pub(crate) fn call(
        &self,
        operation: &str,
        driver: &str,
        service: DraService,
        took: Duration,
        code: tonic::Code,
        failed: bool,
    ) {
        let package = match service {
            DraService::V1 => "k8s.io.kubelet.pkg.apis.dra.v1",
            DraService::V1beta1 => "k8s.io.kubelet.pkg.apis.dra.v1beta1",
        };
        let method = format!("/{package}.DRAPlugin/Node{operation}");
        self.grpc_operations
            .observe(&[driver, &method, grpc_code_name(code)], took);
        let is_error = if failed { "true" } else { "false" };
        self.operations.observe(&[operation, is_error], took);
    }
}

impl MetricsSource for DraMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.operations.register(registry);
        self.grpc_operations.register(registry);
    }
}

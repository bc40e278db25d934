//! The CSI node calls' metric, with the kubelet's name and labels:
//! `csi_operations_seconds{driver_name, method_name, grpc_status_code,
//! migrated}`, every call's duration (the kubelet records it in a gRPC
//! interceptor of its CSI client), fed by the call layer under each
//! driver's client. The method is the full gRPC method
//! (`/csi.v1.Node/NodeStageVolume`), the code Go's name of it (`OK`,
//! `DeadlineExceeded`; `unknown-non-grpc` when the call never reached the
//! driver), and `migrated` `true` for the stage, publish and expand calls
//! of an in-tree volume served by its CSI driver.

use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::call_layer::CallMetrics;
use prometheus_client::registry::Registry;
use tonic::Code;

use crate::metrics::{HistogramVec, MetricsSource, grpc_code_name};

/// The kubelet's buckets of `csi_operations_seconds`.
const BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// The CSI node calls' durations, for `/metrics`. Cheap to clone.
#[derive(Clone)]
pub struct CsiOperations {
    seconds: Arc<HistogramVec>,
}

impl std::fmt::Debug for CsiOperations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsiOperations").finish_non_exhaustive()
    }
}

impl Default for CsiOperations {
    fn default() -> Self {
        Self {
            seconds: Arc::new(HistogramVec::new(
                "csi_operations_seconds",
                "Container Storage Interface operation duration with gRPC error code status total",
                &["driver_name", "method_name", "grpc_status_code", "migrated"],
                BUCKETS,
            )),
        }
    }
}

impl CsiOperations {
    /// Where the calls to driver `driver` are reported, for a migrated
    /// in-tree volume when `migrated`.
    pub(crate) fn of_driver(&self, driver: &str, migrated: bool) -> Arc<dyn CallMetrics> {
        Arc::new(DriverOperations {
            seconds: self.seconds.clone(),
            driver: driver.to_string(),
            migrated: if migrated { "true" } else { "false" },
        })
    }
}

impl MetricsSource for CsiOperations {
    fn register(&self, registry: &mut Registry) {
        self.seconds.register(registry);
    }
}

/// One driver's calls.
struct DriverOperations {
    seconds: Arc<HistogramVec>,
    driver: String,
    migrated: &'static str,
}

impl CallMetrics for DriverOperations {
    fn observed(&self, method: &str, elapsed: Duration, failed: bool) {
        let code = if failed { Code::Unknown } else { Code::Ok };
        self.observed_status(method, elapsed, Some(code));
    }

    fn observed_status(&self, method: &str, elapsed: Duration, code: Option<Code>) {
        let method = format!("/csi.v1.Node/{method}");
        let code = code.map_or("unknown-non-grpc", grpc_code_name);
        self.seconds
            .observe(&[&self.driver, &method, code, self.migrated], elapsed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use prometheus_client::encoding::prometheus_text::encode;

    use super::*;

    #[test]
    fn each_call_is_counted_with_the_kubelets_labels() {
        let operations = CsiOperations::default();
        let driver = operations.of_driver("csi.example.com", false);
        driver.observed_status("NodeStageVolume", Duration::from_millis(30), Some(Code::Ok));
        driver.observed_status(
            "NodePublishVolume",
            Duration::from_secs(3),
            Some(Code::DeadlineExceeded),
        );
        driver.observed_status("NodeUnstageVolume", Duration::from_millis(1), None);
        operations
            .of_driver("ebs.csi.aws.com", true)
            .observed_status("NodeStageVolume", Duration::from_millis(5), Some(Code::Ok));
        let mut registry = Registry::default();
        operations.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for labels in [
            r#"driver_name="csi.example.com",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="OK",migrated="false""#,
            r#"driver_name="csi.example.com",method_name="/csi.v1.Node/NodePublishVolume",grpc_status_code="DeadlineExceeded",migrated="false""#,
            r#"grpc_status_code="unknown-non-grpc""#,
            r#"driver_name="ebs.csi.aws.com",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="OK",migrated="true""#,
        ] {
            assert!(text.contains(labels), "{labels} in {text}");
        }
        assert!(text.contains("le=\"600\""), "the kubelet's buckets: {text}");
    }
}

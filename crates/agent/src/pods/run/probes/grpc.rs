//! The gRPC probe, as the kubelet's: `grpc.health.v1.Health/Check` with the
//! probe's service on the pod's address and the probe's port, in plain
//! text, one timeout for connecting and the call together; `SERVING` is
//! success, anything else a failure in the kubelet's words. The connection
//! is tried again until the timeout (Go's blocking dial), so a port nobody
//! listens on fails as the kubelet's does: not connected within the
//! timeout.

use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

use super::verdict::{Handled, Verdict, join_host_port, seconds};

/// The user agent the kubelet's probe sends.
const USER_AGENT: &str = "kube-probe/1.37";
/// How long a refused connection waits before it is tried again.
const REDIAL: Duration = Duration::from_millis(50);

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub(crate) service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub(crate) status: i32,
}

/// The names of `HealthCheckResponse.ServingStatus`.
fn status_name(status: i32) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        other => other.to_string(),
    }
}

/// Asks the health of `service` at `host:port` within `timeout`.
pub(super) async fn grpc_probe(host: &str, port: i32, service: &str, timeout: Duration) -> Handled {
    let address = join_host_port(host, port);
    let deadline = tokio::time::Instant::now() + timeout;
    let endpoint = Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| ("unknown", e.to_string()))?
        .user_agent(USER_AGENT)
        .map_err(|e| ("unknown", e.to_string()))?;
    let channel = loop {
        match tokio::time::timeout_at(deadline, endpoint.connect()).await {
            Ok(Ok(channel)) => break channel,
            Ok(Err(_)) if tokio::time::Instant::now() + REDIAL < deadline => {
                tokio::time::sleep(REDIAL).await;
            }
            _ => {
                return Ok((
                    Verdict::Failure,
                    format!(
                        "timeout: failed to connect service {address:?} within {}: context deadline exceeded",
                        seconds(timeout)
                    ),
                ));
            }
        }
    };
    let mut client = tonic::client::Grpc::new(channel);
    let call = async {
        client
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = PathAndQuery::from_static("/grpc.health.v1.Health/Check");
        let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
        let request = tonic::Request::new(HealthCheckRequest {
            service: service.to_string(),
        });
        client.unary(request, path, codec).await
    };
    let answer = match tokio::time::timeout_at(deadline, call).await {
        Ok(answer) => answer,
        Err(_) => {
            return Ok((
                Verdict::Failure,
                format!(
                    "timeout: health rpc did not complete within {}",
                    seconds(timeout)
                ),
            ));
        }
    };
    Ok(match answer {
        Ok(response) if response.get_ref().status == 1 => {
            (Verdict::Success, "service healthy".to_string())
        }
        Ok(response) => (
            Verdict::Failure,
            format!(
                "service unhealthy (responded with {:?})",
                status_name(response.get_ref().status)
            ),
        ),
        Err(status) if status.code() == tonic::Code::Unimplemented => (
            Verdict::Failure,
            format!(
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                status.message()
            ),
        ),
        Err(status) if status.code() == tonic::Code::DeadlineExceeded => (
            Verdict::Failure,
            format!(
                "timeout: health rpc did not complete within {}",
                seconds(timeout)
            ),
        ),
        Err(status) => (
            Verdict::Failure,
            format!(
                "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
                status.code(),
                status.message()
            ),
        ),
    })
}

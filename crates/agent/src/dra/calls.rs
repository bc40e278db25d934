//! NodePrepareResources and NodeUnprepareResources through either API
//! version, with a deadline the plugin sees and the agent enforces.

use std::collections::HashMap;
use std::time::Duration;

use http::Uri;
use nodeplugins_api::dra::{v1, v1beta1};
use tonic::{Request, Status};

use super::claim::{ClaimRef, PreparedClaim, PreparedDevice, UnpreparedClaim};
use super::connection::Channel;
use super::service::DraService;

/// The default deadline of prepare and unprepare calls (upstream
/// `defaultClientCallTimeout`, 45 s: half the kubelet's retry period).
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(45);

fn origin() -> Uri {
    Uri::from_static("http://localhost")
}

fn request<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    // Sent as grpc-timeout so the plugin sees the deadline too.
    request.set_timeout(timeout);
    request
}

async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

fn wire_claims(claims: &[ClaimRef]) -> Vec<v1::Claim> {
    claims
        .iter()
        .map(|c| v1::Claim {
            namespace: c.namespace.clone(),
            uid: c.uid.clone(),
            name: c.name.clone(),
        })
        .collect()
}

const MISSING: &str = "the driver's response has no result for this claim";

/// The two calls, as the kubelet names them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Operation {
    Prepare,
    Unprepare,
}

impl Operation {
    /// The RPC's name.
    pub(crate) fn rpc_name(self) -> &'static str {
        match self {
            Self::Prepare => "NodePrepareResources",
            Self::Unprepare => "NodeUnprepareResources",
        }
    }

    /// The kubelet's metric label: the RPC's name without "Node".
    pub(crate) fn metric_name(self) -> &'static str {
        match self {
            Self::Prepare => "PrepareResources",
            Self::Unprepare => "UnprepareResources",
        }
    }
}

/// Prepares `claims`; one result per claim, in order.
pub(crate) async fn prepare(
    channel: Channel,
    service: DraService,
    claims: Vec<ClaimRef>,
    timeout: Duration,
) -> Result<Vec<PreparedClaim>, Status> {
    let message = v1::NodePrepareResourcesRequest {
        claims: wire_claims(&claims),
    };
    let response: v1::NodePrepareResourcesResponse = bounded(timeout, async {
        match service {
            DraService::V1 => {
                let mut client =
                    v1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                client
                    .node_prepare_resources(request(message, timeout))
                    .await
                    .map(|r| r.into_inner())
            }
            DraService::V1beta1 => {
                let mut client =
                    v1beta1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                let message: v1beta1::NodePrepareResourcesRequest = message.into();
                client
                    .node_prepare_resources(request(message, timeout))
                    .await
                    .map(|r| r.into_inner().into())
            }
        }
    })
    .await?;
    Ok(prepare_results(&claims, response.claims))
}

fn prepare_results(
    claims: &[ClaimRef],
    mut results: HashMap<String, v1::NodePrepareResourceResponse>,
) -> Vec<PreparedClaim> {
    claims
        .iter()
        .map(|claim| match results.remove(&claim.uid) {
            Some(result) if !result.error.is_empty() => PreparedClaim {
                claim: claim.clone(),
                devices: Vec::new(),
                error: Some(result.error),
            },
            Some(result) => PreparedClaim {
                claim: claim.clone(),
                devices: result
                    .devices
                    .into_iter()
                    .map(|d| PreparedDevice {
                        request_names: d.request_names,
                        pool: d.pool_name,
                        device: d.device_name,
                        cdi_device_ids: d.cdi_device_ids,
                        share_id: d.share_id,
                    })
                    .collect(),
                error: None,
            },
            None => PreparedClaim {
                claim: claim.clone(),
                devices: Vec::new(),
                error: Some(MISSING.into()),
            },
        })
        .collect()
}

/// Unprepares `claims`; one result per claim, in order.
pub(crate) async fn unprepare(
    channel: Channel,
    service: DraService,
    claims: Vec<ClaimRef>,
    timeout: Duration,
) -> Result<Vec<UnpreparedClaim>, Status> {
    let message = v1::NodeUnprepareResourcesRequest {
        claims: wire_claims(&claims),
    };
    let response: v1::NodeUnprepareResourcesResponse = bounded(timeout, async {
        match service {
            DraService::V1 => {
                let mut client =
                    v1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                client
                    .node_unprepare_resources(request(message, timeout))
                    .await
                    .map(|r| r.into_inner())
            }
            DraService::V1beta1 => {
                let mut client =
                    v1beta1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                let message: v1beta1::NodeUnprepareResourcesRequest = message.into();
                client
                    .node_unprepare_resources(request(message, timeout))
                    .await
                    .map(|r| r.into_inner().into())
            }
        }
    })
    .await?;
    let mut results = response.claims;
    Ok(claims
        .into_iter()
        .map(|claim| UnpreparedClaim {
            claim: claim.clone(),
            error: match results.remove(&claim.uid) {
                Some(result) if result.error.is_empty() => None,
                Some(result) => Some(result.error),
                None => Some(MISSING.into()),
            },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: &str) -> ClaimRef {
        ClaimRef {
            namespace: "ns".into(),
            name: format!("claim-{uid}"),
            uid: uid.into(),
        }
    }

    #[test]
    fn results_follow_the_request_and_missing_claims_are_errors() {
        let results = HashMap::from([
            (
                "a".to_string(),
                v1::NodePrepareResourceResponse {
                    devices: vec![v1::Device {
                        device_name: "gpu-0".into(),
                        ..Default::default()
                    }],
                    error: String::new(),
                },
            ),
            (
                "b".to_string(),
                v1::NodePrepareResourceResponse {
                    devices: vec![v1::Device::default()],
                    error: "broken".into(),
                },
            ),
            (
                "unasked".to_string(),
                v1::NodePrepareResourceResponse::default(),
            ),
        ]);
        let got = prepare_results(&[claim("c"), claim("b"), claim("a")], results);
        assert_eq!(got[0].error.as_deref(), Some(MISSING));
        assert_eq!(got[1].error.as_deref(), Some("broken"));
        assert!(
            got[1].devices.is_empty(),
            "devices of a failed claim are ignored"
        );
        assert_eq!(got[2].error, None);
        assert_eq!(got[2].devices[0].device, "gpu-0");
    }
}

//! NodePrepareResources and NodeUnprepareResources in either API version
//! ([`DraClient`]), answered as one result per claim asked for; the
//! deadline (which the plugin sees and the agent enforces) and the span are
//! the client's call layer's.

use std::collections::HashMap;
use std::time::Duration;

use nodeplugins_api::call::CallError;
use nodeplugins_api::call_layer::CallService;
use nodeplugins_api::dra::v1;
use nodeplugins_api::dra_client::DraClient;

use crate::dra::claim::{ClaimRef, PreparedClaim, PreparedDevice, UnpreparedClaim};
use crate::dra::drivers::connection::Channel;

/// The default deadline of prepare and unprepare calls (upstream
/// `defaultClientCallTimeout`, 45 s: half the kubelet's retry period).
pub(in crate::dra) const CALL_TIMEOUT: Duration = Duration::from_secs(45);

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
    client: DraClient<CallService<Channel>>,
    claims: Vec<ClaimRef>,
) -> Result<Vec<PreparedClaim>, CallError> {
    let request = v1::NodePrepareResourcesRequest {
        claims: wire_claims(&claims),
    };
    let response = client.prepare(request).await?;
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
    client: DraClient<CallService<Channel>>,
    claims: Vec<ClaimRef>,
) -> Result<Vec<UnpreparedClaim>, CallError> {
    let request = v1::NodeUnprepareResourcesRequest {
        claims: wire_claims(&claims),
    };
    let response = client.unprepare(request).await?;
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

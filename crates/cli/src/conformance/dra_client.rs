//! The DRAPlugin client the conformance rules call through: the newest
//! service the driver lists (v1, else v1beta1 through the conversions),
//! answers as per-claim results.

use std::collections::BTreeMap;
use std::time::Duration;

use nodeplugins_api::constants::dra_service;
use nodeplugins_api::dra::{v1, v1beta1};
use nodeplugins_api::pluginregistration::v1::PluginInfo;
use tonic::transport::Channel;

use super::claims::TestClaim;

/// The DRAPlugin service the kubelet would use: the newest listed.
#[derive(Clone)]
pub(crate) enum DraClient {
    V1(v1::dra_plugin_client::DraPluginClient<Channel>),
    V1beta1(v1beta1::dra_plugin_client::DraPluginClient<Channel>),
}

/// Per claim UID: the devices, or the claim's error.
pub(crate) type Prepared = BTreeMap<String, Result<Vec<v1::Device>, String>>;
/// Per claim UID: `Ok` or the claim's error.
pub(crate) type Unprepared = BTreeMap<String, Result<(), String>>;

/// `call`'s answer within `timeout`, its failure as one line.
async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, String> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|s| status_text(&s))
}

/// A gRPC status as one line.
pub(crate) fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

impl DraClient {
    /// A client of the newest DRAPlugin service `info` lists, if any.
    pub(crate) fn new(info: &PluginInfo, channel: Channel) -> Option<Self> {
        let listed = |name: &str| info.supported_versions.iter().any(|v| v == name);
        if listed(dra_service::V1) {
            Some(Self::V1(v1::dra_plugin_client::DraPluginClient::new(
                channel,
            )))
        } else if listed(dra_service::V1BETA1) {
            Some(Self::V1beta1(
                v1beta1::dra_plugin_client::DraPluginClient::new(channel),
            ))
        } else {
            None
        }
    }

    /// NodePrepareResources for `claims`.
    pub(crate) async fn prepare(
        &self,
        claims: &[TestClaim],
        timeout: Duration,
    ) -> Result<Prepared, String> {
        let request = v1::NodePrepareResourcesRequest {
            claims: claims.iter().map(TestClaim::wire).collect(),
        };
        let call = async {
            match self.clone() {
                Self::V1(mut c) => c
                    .node_prepare_resources(request)
                    .await
                    .map(|r| r.into_inner()),
                Self::V1beta1(mut c) => c
                    .node_prepare_resources(v1beta1::NodePrepareResourcesRequest::from(request))
                    .await
                    .map(|r| v1::NodePrepareResourcesResponse::from(r.into_inner())),
            }
        };
        let answer = bounded(timeout, call).await?;
        Ok(answer
            .claims
            .into_iter()
            .map(|(uid, claim)| {
                let result = if claim.error.is_empty() {
                    Ok(claim.devices)
                } else {
                    Err(claim.error)
                };
                (uid, result)
            })
            .collect())
    }

    /// NodeUnprepareResources for `claims`.
    pub(crate) async fn unprepare(
        &self,
        claims: &[TestClaim],
        timeout: Duration,
    ) -> Result<Unprepared, String> {
        let request = v1::NodeUnprepareResourcesRequest {
            claims: claims.iter().map(TestClaim::wire).collect(),
        };
        let call = async {
            match self.clone() {
                Self::V1(mut c) => c
                    .node_unprepare_resources(request)
                    .await
                    .map(|r| r.into_inner()),
                Self::V1beta1(mut c) => c
                    .node_unprepare_resources(v1beta1::NodeUnprepareResourcesRequest::from(request))
                    .await
                    .map(|r| v1::NodeUnprepareResourcesResponse::from(r.into_inner())),
            }
        };
        let answer = bounded(timeout, call).await?;
        Ok(answer
            .claims
            .into_iter()
            .map(|(uid, claim)| {
                let result = if claim.error.is_empty() {
                    Ok(())
                } else {
                    Err(claim.error)
                };
                (uid, result)
            })
            .collect())
    }
}

/// The device identities of a prepared claim, for comparison.
pub(crate) fn identities(
    devices: &[v1::Device],
) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    let mut ids: Vec<_> = devices
        .iter()
        .map(|d| {
            let mut requests = d.request_names.clone();
            requests.sort();
            let mut cdi = d.cdi_device_ids.clone();
            cdi.sort();
            (d.pool_name.clone(), d.device_name.clone(), requests, cdi)
        })
        .collect();
    ids.sort();
    ids
}

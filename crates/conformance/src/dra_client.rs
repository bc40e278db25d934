//! The DRAPlugin client the conformance rules call through: the service
//! the kubelet would use (the first the driver lists that it speaks), answers
//! as per-claim results.

use std::collections::BTreeMap;
use std::time::Duration;

use nodeplugins_api::call_layer::{CallLayer, CallService};
use nodeplugins_api::dra::v1;
use nodeplugins_api::dra_client::{self, DraService, choose_service};
use nodeplugins_api::pluginregistration::v1::PluginInfo;
use tonic::transport::Channel;

use super::claims::TestClaim;

/// The DRAPlugin service the kubelet would use.
#[derive(Clone)]
pub(crate) struct DraClient {
    channel: Channel,
    service: DraService,
}

/// Per claim UID: the devices, or the claim's error.
pub(crate) type Prepared = BTreeMap<String, Result<Vec<v1::Device>, String>>;
/// Per claim UID: `Ok` or the claim's error.
pub(crate) type Unprepared = BTreeMap<String, Result<(), String>>;

/// A claim's answer: `Ok` without an error, else the error.
fn outcome<T>(error: String, ok: T) -> Result<T, String> {
    if error.is_empty() { Ok(ok) } else { Err(error) }
}

impl DraClient {
    /// The client with `timeout` as its calls' deadline.
    fn with_deadline(&self, timeout: Duration) -> dra_client::DraClient<CallService<Channel>> {
        let policy = CallLayer::new("DRA driver", self.service).deadline(timeout);
        dra_client::DraClient::new(policy.service(self.channel.clone()), self.service)
    }

    /// A client of the service the kubelet would use with a driver that
    /// registered with `info`, if it lists one.
    pub(crate) fn new(info: &PluginInfo, channel: Channel) -> Option<Self> {
        let service = choose_service(&info.supported_versions).ok()?;
        Some(Self { channel, service })
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
        let answer = self
            .with_deadline(timeout)
            .prepare(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer
            .claims
            .into_iter()
            .map(|(uid, claim)| (uid, outcome(claim.error, claim.devices)))
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
        let answer = self
            .with_deadline(timeout)
            .unprepare(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer
            .claims
            .into_iter()
            .map(|(uid, claim)| (uid, outcome(claim.error, ())))
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

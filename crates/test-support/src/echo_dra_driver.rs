//! DRA drivers on the SDK for tests where what the driver does matters
//! less than what is around it: one that prepares each claim with the
//! devices allocated to it (read from the API server by the SDK), and one
//! that answers no claim at all.

use std::collections::HashMap;

use nodeplugins_sdk::dra_driver::{
    Claim, DraDriver, PrepareResults, PreparedClaim, PreparedDevice, UnprepareResults,
};

/// Answers each claim with its allocated devices, each with the CDI id
/// `<cdi_kind>=<device>` when a kind is given; unprepares anything.
#[derive(Debug, Default)]
pub struct AllocationEcho {
    /// The CDI kind of the ids given, if any.
    pub cdi_kind: Option<String>,
}

#[async_trait::async_trait]
impl DraDriver for AllocationEcho {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        claims
            .into_iter()
            .map(|claim| {
                let devices = claim
                    .allocation
                    .iter()
                    .flat_map(|a| &a.devices)
                    .map(|d| PreparedDevice {
                        requests: vec![d.request.clone()],
                        pool: d.pool.clone(),
                        device: d.device.clone(),
                        cdi_device_ids: self
                            .cdi_kind
                            .iter()
                            .map(|kind| format!("{kind}={}", d.device))
                            .collect(),
                        ..Default::default()
                    })
                    .collect();
                (claim.claim.uid, Ok(devices))
            })
            .collect()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        claims.into_iter().map(|c| (c.claim.uid, Ok(()))).collect()
    }
}

/// A driver that answers no claim, for tests of what the SDK publishes
/// (slices) where no claim is ever prepared.
#[derive(Debug, Default)]
pub struct NoCalls;

#[async_trait::async_trait]
impl DraDriver for NoCalls {
    async fn prepare(&self, _: Vec<Claim>) -> PrepareResults {
        HashMap::new()
    }

    async fn unprepare(&self, _: Vec<PreparedClaim>) -> UnprepareResults {
        HashMap::new()
    }
}

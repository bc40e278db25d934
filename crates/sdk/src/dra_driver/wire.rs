//! What the kubelet is told of prepared claims: the devices as the
//! `DRAPlugin` v1 messages carry them, each with its base request names,
//! and a claim's result.

use nodeplugins_api::dra::v1;

use super::claim::{ClaimRef, PreparedDevice};

/// The request names the kubelet is told a device serves: the base
/// request of each (`gpu` for a `firstAvailable` subrequest `gpu/big`), as
/// the Go helper sends them, each once (the helper keeps duplicates, which
/// read the same to the kubelet: it looks names up). The kubelet gives a
/// container asking for request `gpu` the devices whose names include
/// exactly `gpu`.
fn base_requests(requests: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(requests.len());
    for request in requests {
        let base = super::claim::base_request(request);
        if !names.iter().any(|n| n == base) {
            names.push(base.to_string());
        }
    }
    names
}

/// `devices` as the kubelet is told of them.
fn wire(devices: &[PreparedDevice]) -> Vec<v1::Device> {
    devices
        .iter()
        .map(|d| v1::Device {
            request_names: base_requests(&d.requests),
            pool_name: d.pool.clone(),
            device_name: d.device.clone(),
            cdi_device_ids: d.cdi_device_ids.clone(),
            share_id: d.share_id.clone(),
        })
        .collect()
}

/// A claim prepared with `devices`.
pub(super) fn prepared(devices: &[PreparedDevice]) -> v1::NodePrepareResourceResponse {
    v1::NodePrepareResourceResponse {
        devices: wire(devices),
        error: String::new(),
    }
}

/// A claim that failed with `error`.
pub(super) fn failed(error: String) -> v1::NodePrepareResourceResponse {
    v1::NodePrepareResourceResponse {
        devices: Vec::new(),
        error,
    }
}

/// The claim a request names.
pub(super) fn claim_ref(claim: v1::Claim) -> ClaimRef {
    ClaimRef {
        namespace: claim.namespace,
        name: claim.name,
        uid: claim.uid.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subrequest_names_reach_the_kubelet_as_their_base_request_each_once() {
        let names = |requests: &[&str]| {
            base_requests(&requests.iter().map(|r| r.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(names(&["gpu/big"]), ["gpu"]);
        assert_eq!(names(&["gpu/big", "gpu/small", "nic"]), ["gpu", "nic"]);
        assert_eq!(names(&["plain"]), ["plain"]);
        assert!(names(&[]).is_empty());
    }
}

//! What a driver prepares and what it got.

use std::collections::BTreeMap;

use super::claim_uid::ClaimUid;
use super::device_attribute::{DeviceAttribute, NetworkDeviceData};
use crate::cdi::ContainerEdits;

/// A ResourceClaim, by reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID; results are keyed by it.
    pub uid: ClaimUid,
}

/// A device the scheduler allocated to this driver for a claim: one
/// `status.allocation.devices.results` entry, with every field it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocatedDevice {
    /// The claim's request it satisfies, as allocated: `gpu`, or
    /// `gpu/big` for subrequest `big` of a `firstAvailable` request `gpu`
    /// (see [`base_request`](Self::base_request) and
    /// [`subrequest`](Self::subrequest)).
    pub request: String,
    /// The pool it is in.
    pub pool: String,
    /// The device.
    pub device: String,
    /// Allocated with admin access (monitoring, not exclusive use).
    #[serde(default)]
    pub admin_access: bool,
    /// For a device that allows several allocations: this allocation's
    /// share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// The capacity this allocation consumes, by name (quantities as the
    /// API writes them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed_capacity: BTreeMap<String, String>,
    /// The taints of the device this allocation tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<DeviceToleration>,
    /// Conditions that must be true on the claim before the pod is bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_conditions: Vec<String>,
    /// Conditions that, if true, make binding fail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_failure_conditions: Vec<String>,
    /// Node operations the driver asked to skip for this device
    /// (`NodePrepareResources`, `NodeUnprepareResources`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_node_operations: Vec<String>,
}

impl AllocatedDevice {
    /// The request without its subrequest: `gpu` for `gpu/big`. The
    /// kubelet matches containers' requests against this name, and the SDK
    /// answers with it.
    pub fn base_request(&self) -> &str {
        base_request(&self.request)
    }

    /// The subrequest of a `firstAvailable` request: `big` for `gpu/big`.
    pub fn subrequest(&self) -> Option<&str> {
        self.request.split_once('/').map(|(_, sub)| sub)
    }
}

/// `gpu` for `gpu/big`, `gpu` for `gpu`.
pub(crate) fn base_request(request: &str) -> &str {
    request.split_once('/').map_or(request, |(base, _)| base)
}

/// A toleration of a device taint (`DeviceToleration`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceToleration {
    /// The taint key; empty matches every key (with `Exists`).
    #[serde(default)]
    pub key: String,
    /// `Equal` or `Exists`.
    #[serde(default)]
    pub operator: String,
    /// The value, for `Equal`.
    #[serde(default)]
    pub value: String,
    /// The effect matched (`NoSchedule`, `NoExecute`), empty for all.
    #[serde(default)]
    pub effect: String,
    /// For `NoExecute`: how long the taint is tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// Where an opaque configuration comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ConfigSource {
    /// The DeviceClass (`FromClass`): set by the administrator.
    FromClass,
    /// The claim (`FromClaim`): set by the user.
    FromClaim,
}

/// An opaque configuration for this driver, from
/// `status.allocation.devices.config`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceConfig {
    /// Where it comes from.
    pub source: ConfigSource,
    /// The requests it applies to (`gpu` also covers its subrequests,
    /// `gpu/big` only that one); empty: all of the claim's requests.
    pub requests: Vec<String>,
    /// The driver's parameters, as the API has them (`opaque.parameters`).
    pub parameters: serde_json::Value,
}

impl DeviceConfig {
    /// Whether it applies to a device allocated for `request` (as
    /// allocated, such as `gpu/big`).
    pub fn applies_to(&self, request: &str) -> bool {
        self.requests.is_empty()
            || self
                .requests
                .iter()
                .any(|r| r == request || r == base_request(request))
    }
}

/// What the scheduler allocated to this driver for a claim.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Allocation {
    /// This driver's allocation results, in the claim's order (results of
    /// other drivers are left out).
    pub devices: Vec<AllocatedDevice>,
    /// This driver's opaque configurations, in the claim's order: the
    /// class's first, then the claim's, so a later one overrides an
    /// earlier one for the same setting, as the API documents.
    pub config: Vec<DeviceConfig>,
}

impl Allocation {
    /// The configurations that apply to `device`, in order.
    pub fn config_for<'a>(
        &'a self,
        device: &'a AllocatedDevice,
    ) -> impl Iterator<Item = &'a DeviceConfig> + 'a {
        self.config
            .iter()
            .filter(move |c| c.applies_to(&device.request))
    }
}

/// A claim to prepare.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Claim {
    /// Which claim.
    pub claim: ClaimRef,
    /// What was allocated to this driver, when the server reads claims
    /// from the API server (`None` without an API client).
    pub allocation: Option<Allocation>,
    /// The ResourceClaim as the API server had it when the server read it
    /// (feature `kube`, with an API client), for anything the typed
    /// [`allocation`](Self::allocation) does not carry: the spec, the
    /// annotations, the allocation's node selector.
    #[cfg(feature = "kube")]
    pub resource_claim: Option<std::sync::Arc<k8s_openapi::api::resource::v1::ResourceClaim>>,
    /// What the driver said the claim got when it prepared it during an
    /// earlier boot of the machine: this prepare follows a reboot, and
    /// what the driver made then (partitions, bindings, virtual functions)
    /// may be gone. The driver makes it again, or fails the claim.
    pub before_reboot: Option<Vec<PreparedDevice>>,
}

impl Claim {
    /// A claim with no allocation read (no API client).
    pub fn new(claim: ClaimRef) -> Self {
        Self {
            claim,
            allocation: None,
            #[cfg(feature = "kube")]
            resource_claim: None,
            before_reboot: None,
        }
    }

    /// The pod's name for the claim when it was made from a template (its
    /// annotation, as read from the API server).
    pub(crate) fn pod_claim_name(&self) -> Option<String> {
        #[cfg(feature = "kube")]
        if let Some(object) = &self.resource_claim {
            let annotations = object.metadata.annotations.as_ref();
            return annotations.and_then(|a| a.get(POD_CLAIM_NAME_ANNOTATION).cloned());
        }
        None
    }
}

/// The annotation of a claim made from a template: the pod's name for it.
#[cfg(feature = "kube")]
const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// A device a claim got.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests it satisfies (as allocated; the kubelet is told
    /// their base names).
    pub requests: Vec<String>,
    /// The pool it is in.
    pub pool: String,
    /// The device.
    pub device: String,
    /// CDI ids of devices from the driver's own CDI specs.
    pub cdi_device_ids: Vec<String>,
    /// What the container needs, written by the server to a CDI spec file
    /// for the claim (with a CDI kind configured); its CDI id is added to
    /// `cdi_device_ids`.
    pub container_edits: Option<ContainerEdits>,
    /// For a shared device: this claim's share (v1 only).
    pub share_id: Option<String>,
    /// What containers are told of the device in its metadata file, with
    /// device metadata on ([`DraDriverBuilder::device_metadata`](super::DraDriverBuilder::device_metadata)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<DeviceMetadata>,
}

impl PreparedDevice {
    /// The device as allocated, before the driver answered: its request,
    /// pool, name and share.
    pub(crate) fn allocated(device: &AllocatedDevice) -> Self {
        Self {
            requests: vec![device.request.clone()],
            pool: device.pool.clone(),
            device: device.device.clone(),
            share_id: device.share_id.clone(),
            ..Default::default()
        }
    }
}

/// How much is known of what a claim got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PreparedState {
    /// The driver's answer, recorded: `devices` are what it said.
    #[default]
    Prepared,
    /// A prepare began and did not finish recording the driver's answer
    /// (the process died, the driver failed the claim, or its CDI spec or
    /// record could not be written): the driver may have prepared the
    /// claim, or part of it. `devices` are what was allocated to it (from
    /// the API server; none without an API client). Unprepare must release
    /// whatever the driver did prepare.
    Interrupted,
    /// Nothing is recorded of the claim: it was never prepared here, or
    /// its record was lost. `devices` is empty.
    Unknown,
}

/// A claim as prepared: what the driver said it got. Kept until the claim
/// is unprepared, across restarts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedClaim {
    /// Which claim.
    pub claim: ClaimRef,
    /// What it got; see [`state`](Self::state).
    pub devices: Vec<PreparedDevice>,
    /// How much is known of it. Records written before this field existed
    /// read as prepared.
    #[serde(default)]
    pub state: PreparedState,
    /// The boot of the machine during which it was recorded
    /// (`/proc/sys/kernel/random/boot_id`); `None` in records written
    /// before this field existed, which count as of this boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

impl PreparedClaim {
    /// The record of `claim` being prepared during boot `boot_id`: the
    /// devices allocated to it, so that unprepare can release them if
    /// nothing more is ever recorded.
    pub(crate) fn interrupted(claim: &Claim, boot_id: Option<String>) -> Self {
        Self {
            claim: claim.claim.clone(),
            devices: claim
                .allocation
                .iter()
                .flat_map(|a| &a.devices)
                .map(PreparedDevice::allocated)
                .collect(),
            state: PreparedState::Interrupted,
            boot_id,
        }
    }

    /// Whether the driver prepared the claim during boot `boot` (a record
    /// or a boot of unknown identity counts as this boot's).
    pub(crate) fn prepared_during(&self, boot: Option<&str>) -> bool {
        self.state == PreparedState::Prepared
            && match (self.boot_id.as_deref(), boot) {
                (Some(recorded), Some(boot)) => recorded == boot,
                _ => true,
            }
    }
}

/// What a driver tells containers of a device, beyond its name.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMetadata {
    /// Attributes by qualified name (`gpu.example.com/model`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attributes: std::collections::BTreeMap<String, DeviceAttribute>,
    /// Network data, for a network device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<NetworkDeviceData>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(requests: &[&str]) -> DeviceConfig {
        DeviceConfig {
            source: ConfigSource::FromClaim,
            requests: requests.iter().map(|r| r.to_string()).collect(),
            parameters: serde_json::json!({}),
        }
    }

    #[test]
    fn a_subrequest_is_seen_both_ways() {
        let device = AllocatedDevice {
            request: "gpu/big".into(),
            ..Default::default()
        };
        assert_eq!(device.base_request(), "gpu");
        assert_eq!(device.subrequest(), Some("big"));
        let plain = AllocatedDevice {
            request: "nic".into(),
            ..Default::default()
        };
        assert_eq!((plain.base_request(), plain.subrequest()), ("nic", None));
    }

    #[test]
    fn a_config_for_a_request_covers_its_subrequests_and_one_for_a_subrequest_only_it() {
        assert!(config(&[]).applies_to("anything/sub"));
        assert!(config(&["gpu"]).applies_to("gpu"));
        assert!(config(&["gpu"]).applies_to("gpu/big"));
        assert!(config(&["gpu/big"]).applies_to("gpu/big"));
        assert!(!config(&["gpu/big"]).applies_to("gpu/small"));
        assert!(!config(&["gpu/big"]).applies_to("gpu"));
        assert!(!config(&["nic"]).applies_to("gpu/big"));
    }

    #[test]
    fn records_written_before_the_state_existed_read_as_prepared() {
        let old = serde_json::json!({
            "claim": {"namespace": "ns", "name": "c", "uid": "u"},
            "devices": [],
        });
        let record: PreparedClaim = serde_json::from_value(old).unwrap();
        assert_eq!(record.state, PreparedState::Prepared);
    }
}

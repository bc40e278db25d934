//! Conversions between the DRA API versions.
//!
//! v1 is the canonical form: the agent's client and the SDK's server work in
//! v1 messages and speak v1beta1 through these conversions, as upstream does
//! with its conversion wrappers. The versions differ only in v1's
//! `Device.share_id`, which v1beta1 cannot carry and drops. The same holds for
//! device health: v1alpha1 lacks `health_check_timeout_seconds` and
//! `message`, which read as unset.

use crate::dra::{v1, v1beta1};
use crate::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};

impl From<v1::Claim> for v1beta1::Claim {
    fn from(c: v1::Claim) -> Self {
        Self {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        }
    }
}

impl From<v1beta1::Claim> for v1::Claim {
    fn from(c: v1beta1::Claim) -> Self {
        Self {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        }
    }
}

impl From<v1::Device> for v1beta1::Device {
    fn from(d: v1::Device) -> Self {
        Self {
            request_names: d.request_names,
            pool_name: d.pool_name,
            device_name: d.device_name,
            cdi_device_ids: d.cdi_device_ids,
        }
    }
}

impl From<v1beta1::Device> for v1::Device {
    fn from(d: v1beta1::Device) -> Self {
        Self {
            request_names: d.request_names,
            pool_name: d.pool_name,
            device_name: d.device_name,
            cdi_device_ids: d.cdi_device_ids,
            share_id: None,
        }
    }
}

impl From<v1::NodePrepareResourcesRequest> for v1beta1::NodePrepareResourcesRequest {
    fn from(r: v1::NodePrepareResourcesRequest) -> Self {
        Self {
            claims: r.claims.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<v1beta1::NodePrepareResourcesRequest> for v1::NodePrepareResourcesRequest {
    fn from(r: v1beta1::NodePrepareResourcesRequest) -> Self {
        Self {
            claims: r.claims.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<v1::NodeUnprepareResourcesRequest> for v1beta1::NodeUnprepareResourcesRequest {
    fn from(r: v1::NodeUnprepareResourcesRequest) -> Self {
        Self {
            claims: r.claims.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<v1beta1::NodeUnprepareResourcesRequest> for v1::NodeUnprepareResourcesRequest {
    fn from(r: v1beta1::NodeUnprepareResourcesRequest) -> Self {
        Self {
            claims: r.claims.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<v1::NodePrepareResourceResponse> for v1beta1::NodePrepareResourceResponse {
    fn from(r: v1::NodePrepareResourceResponse) -> Self {
        Self {
            devices: r.devices.into_iter().map(Into::into).collect(),
            error: r.error,
        }
    }
}

impl From<v1beta1::NodePrepareResourceResponse> for v1::NodePrepareResourceResponse {
    fn from(r: v1beta1::NodePrepareResourceResponse) -> Self {
        Self {
            devices: r.devices.into_iter().map(Into::into).collect(),
            error: r.error,
        }
    }
}

impl From<v1::NodePrepareResourcesResponse> for v1beta1::NodePrepareResourcesResponse {
    fn from(r: v1::NodePrepareResourcesResponse) -> Self {
        Self {
            claims: r.claims.into_iter().map(|(k, v)| (k, v.into())).collect(),
        }
    }
}

impl From<v1beta1::NodePrepareResourcesResponse> for v1::NodePrepareResourcesResponse {
    fn from(r: v1beta1::NodePrepareResourcesResponse) -> Self {
        Self {
            claims: r.claims.into_iter().map(|(k, v)| (k, v.into())).collect(),
        }
    }
}

impl From<v1::NodeUnprepareResourcesResponse> for v1beta1::NodeUnprepareResourcesResponse {
    fn from(r: v1::NodeUnprepareResourcesResponse) -> Self {
        Self {
            claims: r
                .claims
                .into_iter()
                .map(|(k, v)| (k, v1beta1::NodeUnprepareResourceResponse { error: v.error }))
                .collect(),
        }
    }
}

impl From<v1beta1::NodeUnprepareResourcesResponse> for v1::NodeUnprepareResourcesResponse {
    fn from(r: v1beta1::NodeUnprepareResourcesResponse) -> Self {
        Self {
            claims: r
                .claims
                .into_iter()
                .map(|(k, v)| (k, v1::NodeUnprepareResourceResponse { error: v.error }))
                .collect(),
        }
    }
}

impl From<health_v1::DeviceHealth> for health_v1alpha1::DeviceHealth {
    fn from(d: health_v1::DeviceHealth) -> Self {
        Self {
            device: d.device.map(|id| health_v1alpha1::DeviceIdentifier {
                pool_name: id.pool_name,
                device_name: id.device_name,
            }),
            // The enums share their numbers.
            health: d.health,
            last_updated_time: d.last_updated_time,
        }
    }
}

impl From<health_v1alpha1::DeviceHealth> for health_v1::DeviceHealth {
    fn from(d: health_v1alpha1::DeviceHealth) -> Self {
        Self {
            device: d.device.map(|id| health_v1::DeviceIdentifier {
                pool_name: id.pool_name,
                device_name: id.device_name,
            }),
            health: d.health,
            last_updated_time: d.last_updated_time,
            health_check_timeout_seconds: 0,
            message: String::new(),
        }
    }
}

impl From<health_v1::NodeWatchResourcesResponse> for health_v1alpha1::NodeWatchResourcesResponse {
    fn from(r: health_v1::NodeWatchResourcesResponse) -> Self {
        Self {
            devices: r.devices.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<health_v1alpha1::NodeWatchResourcesResponse> for health_v1::NodeWatchResourcesResponse {
    fn from(r: health_v1alpha1::NodeWatchResourcesResponse) -> Self {
        Self {
            devices: r.devices.into_iter().map(Into::into).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_response_round_trips_except_share_id() {
        let device = v1::Device {
            request_names: vec!["gpu".into()],
            pool_name: "node-1".into(),
            device_name: "gpu-0".into(),
            cdi_device_ids: vec!["dra.example.com/gpu=gpu-0".into()],
            share_id: Some("share".into()),
        };
        let response = v1::NodePrepareResourcesResponse {
            claims: [(
                "uid-1".to_string(),
                v1::NodePrepareResourceResponse {
                    devices: vec![device.clone()],
                    error: String::new(),
                },
            )]
            .into(),
        };
        let back: v1::NodePrepareResourcesResponse =
            v1beta1::NodePrepareResourcesResponse::from(response).into();
        let got = &back.claims["uid-1"].devices[0];
        assert_eq!(got.share_id, None);
        assert_eq!(
            got,
            &v1::Device {
                share_id: None,
                ..device
            }
        );
    }

    #[test]
    fn health_v1alpha1_reads_timeout_and_message_as_unset() {
        let alpha = health_v1alpha1::DeviceHealth {
            device: Some(health_v1alpha1::DeviceIdentifier {
                pool_name: "p".into(),
                device_name: "d".into(),
            }),
            health: health_v1alpha1::HealthStatus::Unhealthy as i32,
            last_updated_time: 7,
        };
        let v1: health_v1::DeviceHealth = alpha.into();
        assert_eq!(v1.health, health_v1::HealthStatus::Unhealthy as i32);
        assert_eq!(v1.health_check_timeout_seconds, 0);
        assert!(v1.message.is_empty());
    }
}

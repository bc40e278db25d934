//! The kubelet's side of a DRA driver's services, whichever version the
//! driver serves: which `DRAPlugin` and `DRAResourceHealth` service to use
//! (picked as the kubelet picks), prepare and unprepare through either
//! `DRAPlugin` version, and the health stream through either
//! `DRAResourceHealth` version, all answered in v1 messages. The agent's DRA
//! manager and the CLI's `check` and `conformance` use it.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use http::Uri;
use tonic::Status;
use tonic::body::Body as RequestBody;
use tonic::client::GrpcService;
use tonic::codegen::{Body, Bytes, StdError};

use crate::call::{self, CallError};
use crate::constants::dra_service;
use crate::dra::{v1, v1beta1};
use crate::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};

/// The `DRAPlugin` services spoken here, newest first.
pub const SUPPORTED_SERVICES: &[&str] = &[dra_service::V1, dra_service::V1BETA1];

/// The `DRAPlugin` API version used with one driver instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DraService {
    /// `v1.DRAPlugin`.
    #[serde(rename = "v1.DRAPlugin")]
    V1,
    /// `v1beta1.DRAPlugin`.
    #[serde(rename = "v1beta1.DRAPlugin")]
    V1beta1,
}

impl DraService {
    /// The name drivers list.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => dra_service::V1,
            Self::V1beta1 => dra_service::V1BETA1,
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            dra_service::V1 => Some(Self::V1),
            dra_service::V1BETA1 => Some(Self::V1beta1),
            _ => None,
        }
    }
}

impl std::fmt::Display for DraService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `DRAResourceHealth` API version used with one driver instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HealthService {
    /// `v1.DRAResourceHealth`.
    #[serde(rename = "v1.DRAResourceHealth")]
    V1,
    /// `v1alpha1.DRAResourceHealth`.
    #[serde(rename = "v1alpha1.DRAResourceHealth")]
    V1alpha1,
}

impl HealthService {
    /// The name drivers list.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => dra_service::HEALTH_V1,
            Self::V1alpha1 => dra_service::HEALTH_V1ALPHA1,
        }
    }
}

/// Why none of a driver's services can be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The driver lists none.
    #[error("empty list of supported gRPC services (aka supported versions)")]
    Empty,
    /// None of those listed is spoken here.
    #[error(
        "none of services supported by the plugin ({services:?}) are supported by the agent ({SUPPORTED_SERVICES:?})"
    )]
    NoneSupported {
        /// What the driver listed.
        services: Vec<String>,
    },
}

/// The `DRAPlugin` service the kubelet uses: the first of `services` (in the
/// driver's order) that it speaks.
pub fn choose_service(services: &[String]) -> Result<DraService, ServiceError> {
    if services.is_empty() {
        return Err(ServiceError::Empty);
    }
    services
        .iter()
        .find_map(|s| DraService::parse(s))
        .ok_or_else(|| ServiceError::NoneSupported {
            services: services.to_vec(),
        })
}

/// The health service the kubelet uses, if the driver lists one: v1 over
/// v1alpha1, whatever the driver's order.
pub fn choose_health_service(services: &[String]) -> Option<HealthService> {
    let listed = |name: &str| services.iter().any(|s| s == name);
    if listed(dra_service::HEALTH_V1) {
        Some(HealthService::V1)
    } else if listed(dra_service::HEALTH_V1ALPHA1) {
        Some(HealthService::V1alpha1)
    } else {
        None
    }
}

/// The health updates of one stream, in v1 messages.
pub type HealthStream =
    Pin<Box<dyn Stream<Item = Result<health_v1::NodeWatchResourcesResponse, Status>> + Send>>;

/// Calls one driver instance's `DRAPlugin` service over `channel`, in the
/// version given, with requests and answers in v1 messages. The calls'
/// deadline and span are the channel's [`CallLayer`]'s: put one under it.
///
/// [`CallLayer`]: crate::call_layer::CallLayer
#[derive(Clone)]
pub struct DraClient<T> {
    channel: T,
    service: DraService,
}

/// The origin requests name: gRPC over a Unix socket has no host.
fn origin() -> Uri {
    Uri::from_static("http://localhost")
}

impl<T> DraClient<T>
where
    T: GrpcService<RequestBody> + Clone,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// A client of `service` over `channel`.
    pub fn new(channel: T, service: DraService) -> Self {
        Self { channel, service }
    }

    /// The version spoken.
    pub fn service(&self) -> DraService {
        self.service
    }

    /// `NodePrepareResources`.
    pub async fn prepare(
        &self,
        request: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, CallError> {
        let channel = self.channel.clone();
        match self.service {
            DraService::V1 => {
                let mut client =
                    v1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                call::answer(client.node_prepare_resources(request)).await
            }
            DraService::V1beta1 => {
                let mut client =
                    v1beta1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                let request = v1beta1::NodePrepareResourcesRequest::from(request);
                call::answer(client.node_prepare_resources(request))
                    .await
                    .map(Into::into)
            }
        }
    }

    /// `NodeUnprepareResources`.
    pub async fn unprepare(
        &self,
        request: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, CallError> {
        let channel = self.channel.clone();
        match self.service {
            DraService::V1 => {
                let mut client =
                    v1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                call::answer(client.node_unprepare_resources(request)).await
            }
            DraService::V1beta1 => {
                let mut client =
                    v1beta1::dra_plugin_client::DraPluginClient::with_origin(channel, origin());
                let request = v1beta1::NodeUnprepareResourcesRequest::from(request);
                call::answer(client.node_unprepare_resources(request))
                    .await
                    .map(Into::into)
            }
        }
    }
}

/// Opens `service`'s health stream over `channel` (`NodeWatchResources`,
/// which carries no deadline: it runs as long as the driver serves it).
pub async fn watch_health<T>(channel: T, service: HealthService) -> Result<HealthStream, Status>
where
    T: GrpcService<RequestBody>,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    Ok(match service {
        HealthService::V1 => {
            let mut client =
                health_v1::dra_resource_health_client::DraResourceHealthClient::with_origin(
                    channel,
                    origin(),
                );
            let request = health_v1::NodeWatchResourcesRequest {};
            Box::pin(client.node_watch_resources(request).await?.into_inner())
        }
        HealthService::V1alpha1 => {
            let mut client =
                health_v1alpha1::dra_resource_health_client::DraResourceHealthClient::with_origin(
                    channel,
                    origin(),
                );
            let request = health_v1alpha1::NodeWatchResourcesRequest {};
            let stream = client.node_watch_resources(request).await?.into_inner();
            Box::pin(stream.map(|message| message.map(Into::into)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn health_prefers_v1_whatever_the_order() {
        let both = names(&[dra_service::HEALTH_V1ALPHA1, dra_service::HEALTH_V1]);
        assert_eq!(choose_health_service(&both), Some(HealthService::V1));
        let alpha = names(&[dra_service::V1, dra_service::HEALTH_V1ALPHA1]);
        assert_eq!(choose_health_service(&alpha), Some(HealthService::V1alpha1));
        assert_eq!(choose_health_service(&names(&[dra_service::V1])), None);
    }

    #[test]
    fn the_first_service_spoken_in_the_drivers_order_is_used() {
        let list = names(&["v2.DRAPlugin", dra_service::V1BETA1, dra_service::V1]);
        assert_eq!(choose_service(&list), Ok(DraService::V1beta1));
        assert_eq!(choose_service(&[]), Err(ServiceError::Empty));
        let unknown = names(&["v2.DRAPlugin"]);
        assert_eq!(
            choose_service(&unknown),
            Err(ServiceError::NoneSupported { services: unknown })
        );
    }
}

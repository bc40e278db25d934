//! Which gRPC services the agent uses with a DRA plugin: the plugin lists the
//! services it serves (as `PluginInfo.supported_versions`) and the agent picks
//! the first one it supports, in the plugin's order.

use nodeplugins_api::constants::dra_service;

/// The DRAPlugin service versions the agent speaks, newest first.
pub(super) const SUPPORTED_SERVICES: &[&str] = &[dra_service::V1, dra_service::V1BETA1];

/// The DRAPlugin API version used with one plugin instance.
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
    /// The name plugins list.
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

/// The device health service version used with one plugin instance.
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
    /// The name plugins list.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => dra_service::HEALTH_V1,
            Self::V1alpha1 => dra_service::HEALTH_V1ALPHA1,
        }
    }
}

/// Why none of a plugin's services can be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The plugin lists none.
    #[error("empty list of supported gRPC services (aka supported versions)")]
    Empty,
    /// The agent supports none of those listed.
    #[error(
        "none of services supported by the plugin ({services:?}) are supported by the agent ({SUPPORTED_SERVICES:?})"
    )]
    NoneSupported {
        /// What the plugin listed.
        services: Vec<String>,
    },
}

/// Picks the DRAPlugin service: the first of `services` the agent supports.
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

/// Picks the health service, if the plugin lists one: v1 over v1alpha1.
pub(super) fn choose_health_service(services: &[String]) -> Option<HealthService> {
    let listed = |name: &str| services.iter().any(|s| s == name);
    if listed(dra_service::HEALTH_V1) {
        Some(HealthService::V1)
    } else if listed(dra_service::HEALTH_V1ALPHA1) {
        Some(HealthService::V1alpha1)
    } else {
        None
    }
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
    fn unknown_entries_are_skipped() {
        let list = names(&["v2.DRAPlugin", dra_service::V1BETA1, dra_service::V1]);
        assert_eq!(choose_service(&list).unwrap(), DraService::V1beta1);
    }
}

//! The `certificates.k8s.io/v1` objects a node reads for its pods'
//! projections, in types of their own, the parts written and read here:
//! the Kubernetes versions an application may pick to build the library
//! on have no v1 of them in their API types.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// `kube::Resource` for one of these types: its kind, plural and scope.
macro_rules! certificates_v1 {
    ($type:ident, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = $scope;

            fn kind((): &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group((): &()) -> std::borrow::Cow<'_, str> {
                "certificates.k8s.io".into()
            }

            fn version((): &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }

            fn plural((): &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A ClusterTrustBundle of `certificates.k8s.io/v1`, the parts read here
/// (the library builds on Kubernetes versions whose API types have no v1
/// of it).
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct ClusterTrustBundle {
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: BundleSpec,
}

/// A bundle's `spec`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BundleSpec {
    #[serde(default)]
    pub(crate) signer_name: Option<String>,
    #[serde(default)]
    pub(crate) trust_bundle: String,
}

certificates_v1!(
    ClusterTrustBundle,
    "ClusterTrustBundle",
    "clustertrustbundles",
    k8s_openapi::ClusterResourceScope
);

/// A PodCertificateRequest of `certificates.k8s.io/v1`, the parts written
/// and read here (the library builds on Kubernetes versions whose API
/// types have no v1 of it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct PodCertificateRequest {
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: RequestSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<RequestStatus>,
}

/// A request's `spec`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestSpec {
    pub(crate) signer_name: String,
    pub(crate) pod_name: String,
    #[serde(rename = "podUID")]
    pub(crate) pod_uid: String,
    pub(crate) service_account_name: String,
    #[serde(rename = "serviceAccountUID")]
    pub(crate) service_account_uid: String,
    pub(crate) node_name: String,
    #[serde(rename = "nodeUID")]
    pub(crate) node_uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_expiration_seconds: Option<i32>,
    /// Base64, as the API writes bytes.
    #[serde(rename = "stubPKCS10Request", default)]
    pub(crate) stub_pkcs10_request: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unverified_user_annotations: Option<BTreeMap<String, String>>,
}

/// A request's `status`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestStatus {
    #[serde(default)]
    pub(crate) conditions: Vec<RequestCondition>,
    #[serde(default)]
    pub(crate) certificate_chain: Option<String>,
    #[serde(default)]
    pub(crate) begin_refresh_at: Option<k8s_openapi::jiff::Timestamp>,
    #[serde(default)]
    pub(crate) not_after: Option<k8s_openapi::jiff::Timestamp>,
}

/// One of a request's conditions.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct RequestCondition {
    #[serde(rename = "type")]
    pub(crate) type_: String,
    #[serde(default)]
    pub(crate) reason: String,
    #[serde(default)]
    pub(crate) message: String,
}

certificates_v1!(
    PodCertificateRequest,
    "PodCertificateRequest",
    "podcertificaterequests",
    k8s_openapi::NamespaceResourceScope
);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_request_is_written_with_the_apis_field_names() {
        let request = PodCertificateRequest {
            metadata: ObjectMeta::default(),
            spec: RequestSpec {
                pod_uid: "u".into(),
                service_account_uid: "s".into(),
                node_uid: "n".into(),
                stub_pkcs10_request: "AA==".into(),
                ..RequestSpec::default()
            },
            status: None,
        };
        let json = serde_json::to_value(&request).unwrap();
        for field in [
            "signerName",
            "podName",
            "podUID",
            "serviceAccountName",
            "serviceAccountUID",
            "nodeName",
            "nodeUID",
            "stubPKCS10Request",
        ] {
            assert!(json["spec"].get(field).is_some(), "{field} in {json}");
        }
        assert!(json["spec"].get("maxExpirationSeconds").is_none());
        assert!(json.get("status").is_none());
    }
}

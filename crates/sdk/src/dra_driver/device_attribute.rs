//! What a driver tells containers of a device beyond its name, typed as
//! the API types them (`resource.k8s.io` `DeviceAttribute` and
//! `NetworkDeviceData`), serialized as the API writes them. The SDK's own
//! types: a driver without the `kube` feature has no Kubernetes types.

/// A device attribute's value, as the API writes it: exactly one kind
/// (`{"string": "a100"}`, `{"int": 80}`, `{"bool": true}`,
/// `{"version": "1.2.0"}`, or a list of one kind, such as `{"ints": [1, 2]}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum DeviceAttribute {
    /// A string (at most 64 characters).
    String(String),
    /// A number.
    Int(i64),
    /// True or false.
    Bool(bool),
    /// A semantic version (`1.2.0`).
    Version(String),
    /// A non-empty list of strings.
    Strings(Vec<String>),
    /// A non-empty list of numbers.
    Ints(Vec<i64>),
    /// A non-empty list of true/false values.
    Bools(Vec<bool>),
    /// A non-empty list of semantic versions.
    Versions(Vec<String>),
}

/// A network device's data, as the API's `NetworkDeviceData`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDeviceData {
    /// The interface's name in the pod's network namespace (`eth1`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface_name: String,
    /// Its addresses with prefix length (`10.9.8.7/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// Its hardware (MAC) address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hardware_address: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_network_data_are_written_as_the_api_writes_them() {
        let written = serde_json::to_value([
            DeviceAttribute::String("big".into()),
            DeviceAttribute::Int(80),
            DeviceAttribute::Bool(true),
            DeviceAttribute::Version("1.2.0".into()),
            DeviceAttribute::Ints(vec![1, 2]),
        ])
        .unwrap();
        assert_eq!(
            written,
            serde_json::json!([
                {"string": "big"}, {"int": 80}, {"bool": true}, {"version": "1.2.0"},
                {"ints": [1, 2]},
            ])
        );
        let network = NetworkDeviceData {
            interface_name: "eth1".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&network).unwrap(),
            serde_json::json!({"interfaceName": "eth1"})
        );
        // A record written before the types read back the same.
        let read: DeviceAttribute = serde_json::from_str(r#"{"string":"big"}"#).unwrap();
        assert_eq!(read, DeviceAttribute::String("big".into()));
    }
}

//! Upstream's name rules: extended resource names, DNS subdomains and
//! device plugin endpoints.

/// Whether `name` is a valid extended resource name: a domain-qualified
/// name (`vendor.example.com/gpu`) outside the `kubernetes.io` namespaces,
/// whose quota form `requests.<name>` is also a valid qualified name.
pub fn is_extended_resource_name(name: &str) -> bool {
    let Some((prefix, local)) = name.split_once('/') else {
        return false;
    };
    if prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io") {
        return false;
    }
    is_dns_subdomain(prefix)
        && is_qualified_local_name(local)
        && is_dns_subdomain(&format!("requests.{prefix}"))
}

/// A DNS-1123 subdomain: at most 253 characters of lower-case alphanumerics,
/// '-' and '.', starting and ending with an alphanumeric.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.split('.')
            .all(|label| !label.is_empty() && label.len() <= 63)
}

/// The name part of a qualified name: at most 63 characters of
/// alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric.
fn is_qualified_local_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Whether `endpoint` (from a kubelet.sock RegisterRequest) is a plain file
/// name inside the device plugin directory: no separators, not `.` or `..`.
pub fn is_plain_socket_name(endpoint: &str) -> bool {
    !endpoint.is_empty()
        && endpoint != "."
        && endpoint != ".."
        && !endpoint.contains('/')
        && !endpoint.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resource_names() {
        for ok in [
            "example.com/device",
            "nvidia.com/gpu",
            "vendor.example.com/a_b.c-d",
            "x.io/1",
        ] {
            assert!(is_extended_resource_name(ok), "{ok}");
        }
        for bad in [
            "gpu",
            "kubernetes.io/gpu",
            "node.kubernetes.io/x",
            "Example.com/gpu",
            "example.com/",
            "/gpu",
            "example.com/-gpu",
            "example..com/gpu",
            "example.com/a/b",
            &format!("example.com/{}", "g".repeat(64)),
        ] {
            assert!(!is_extended_resource_name(bad), "{bad}");
        }
    }

    #[test]
    fn plain_socket_names() {
        assert!(is_plain_socket_name("gpu.sock"));
        assert!(is_plain_socket_name("gdp-Z3B1-1700000000.sock"));
        for bad in ["", ".", "..", "../kubelet.sock", "a/b.sock", "/abs.sock"] {
            assert!(!is_plain_socket_name(bad), "{bad}");
        }
    }
}

//! The Node's addresses, chosen as the kubelet's `NodeAddress` setter
//! chooses them: the configured node IPs (`--node-ip`), else the host name
//! when it is an IP, else the first usable address the host name resolves
//! to (IPv4 first), else the address the default route leaves from; then
//! the host name. A usable address is not loopback, link-local, multicast
//! or unspecified; the kubelet refuses a configured loopback address,
//! which tests that run many nodes on one machine need: the agent takes it,
//! and says so once.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

/// An address of the Node: its type (`InternalIP`, `Hostname`) and value.
pub(in crate::kube_api) type NodeAddress = (&'static str, String);

/// Whether `ip` can be a node's address.
fn usable(ip: IpAddr) -> bool {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    !(ip.is_loopback() || ip.is_multicast() || ip.is_unspecified() || link_local)
}

/// The addresses of node `hostname`: `configured` (the node IPs), or one
/// found as the kubelet finds it. `None` when there is none ("can't get ip
/// address of node").
pub(in crate::kube_api) fn node_addresses(
    hostname: &str,
    configured: &[IpAddr],
) -> Option<Vec<NodeAddress>> {
    let ips: Vec<IpAddr> = if configured.is_empty() {
        vec![discovered(hostname)?]
    } else {
        for ip in configured.iter().filter(|ip| !usable(**ip)) {
            tracing::warn!(node_ip = %ip, "the node IP is not one the kubelet accepts (loopback, link-local, multicast or unspecified): taken as given");
        }
        configured.to_vec()
    };
    let mut addresses: Vec<NodeAddress> = ips
        .into_iter()
        .map(|ip| ("InternalIP", ip.to_string()))
        .collect();
    addresses.push(("Hostname", hostname.to_string()));
    Some(addresses)
}

/// The host name as an IP, else its first usable resolved address (IPv4
/// first), else the default route's source address.
fn discovered(hostname: &str) -> Option<IpAddr> {
    if let Ok(ip) = hostname.parse::<IpAddr>() {
        return Some(ip);
    }
    let resolved: Vec<IpAddr> = (hostname, 0)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip()).filter(|ip| usable(*ip)).collect())
        .unwrap_or_default();
    resolved
        .iter()
        .find(|ip| ip.is_ipv4())
        .or_else(|| resolved.first())
        .copied()
        .or_else(default_route_source)
}

/// The address packets to the rest of the world leave from: a UDP socket
/// connected (nothing is sent) to an address no host has (TEST-NET-1) is
/// bound to it by the routing table.
fn default_route_source() -> Option<IpAddr> {
    let socket = UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    socket.connect(SocketAddr::from(([192, 0, 2, 1], 9))).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    usable(ip).then_some(ip)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn configured_ips_come_first_then_the_host_name() {
        let ips: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        assert_eq!(
            node_addresses("node-a", &ips).unwrap(),
            [
                ("InternalIP", "10.0.0.5".to_string()),
                ("InternalIP", "fd00::5".to_string()),
                ("Hostname", "node-a".to_string()),
            ]
        );
    }

    #[test]
    fn a_loopback_node_ip_is_taken_as_given() {
        let ips: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap()];
        assert_eq!(
            node_addresses("node-a", &ips).unwrap()[0],
            ("InternalIP", "127.0.0.1".to_string())
        );
    }

    #[test]
    fn a_host_name_that_is_an_ip_is_the_address() {
        assert_eq!(
            node_addresses("10.1.2.3", &[]).unwrap(),
            [
                ("InternalIP", "10.1.2.3".to_string()),
                ("Hostname", "10.1.2.3".to_string()),
            ]
        );
    }

    #[test]
    fn only_routable_unicast_addresses_are_usable() {
        for bad in [
            "127.0.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
        ] {
            assert!(!usable(bad.parse().unwrap()), "{bad}");
        }
        for good in ["10.0.0.1", "192.168.1.1", "fd00::1", "2001:db8::1"] {
            assert!(usable(good.parse().unwrap()), "{good}");
        }
    }
}

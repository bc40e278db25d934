//! A pod's resolver settings (its sandbox's `/etc/resolv.conf`), as the
//! kubelet's DNS configurer makes them from the pod's `dnsPolicy` and
//! `dnsConfig`, the node's cluster DNS settings (`clusterDNS`,
//! `clusterDomain`) and the node's resolver file (`resolvConf`):
//!
//! - `ClusterFirst` (the default) off the host's network, and
//!   `ClusterFirstWithHostNet`: the cluster's name servers alone, the
//!   search path `<ns>.svc.<domain> svc.<domain> <domain>` before the
//!   node's, `ndots:5`; without cluster name servers, a `MissingClusterDNS`
//!   warning and what `Default` gives;
//! - `Default`, and `ClusterFirst` in the host's network: the node's file;
//!   with no file (`resolvConf: ""`), a loopback name server per family of
//!   the node's addresses and the search path `.`;
//! - `None`: nothing but the pod's `dnsConfig`.
//!
//! The pod's `dnsConfig` is then added (name servers and search domains
//! after those, each once; options by name, the pod's winning), and the
//! result cut to what a resolver takes: 3 name servers, 32 search domains
//! of at most 253 characters and 2048 in all, each cut told in a
//! `DNSConfigForming` warning.

use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

use super::host_dns::set_option;
use crate::runtime::DnsSpec;

/// The most name servers a pod's resolver gets (`MaxDNSNameservers`).
const MAX_SERVERS: usize = 3;
/// The most search domains (`MaxDNSSearchPaths`).
const MAX_SEARCHES: usize = 32;
/// The longest search line (`MaxDNSSearchListChars`).
const MAX_SEARCH_CHARS: usize = 2048;
/// The longest search domain kept (a DNS-1123 subdomain's limit; longer
/// ones abort some resolvers).
const MAX_SEARCH_LENGTH: usize = 253;
/// The options of a cluster-first pod.
const CLUSTER_OPTIONS: &str = "ndots:5";

/// The node's DNS settings for its pods (the kubelet's `clusterDNS`,
/// `clusterDomain` and `resolvConf`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PodDnsConfig {
    /// The cluster's name servers, given to cluster-first pods. Default:
    /// none (those pods get the node's settings, with a warning).
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster's domain, whose service domains lead a cluster-first
    /// pod's search path. Default: none.
    pub cluster_domain: String,
    /// The node's resolver file, the base of every pod's settings but
    /// `dnsPolicy: None`; `None`: no file (pods in the node's DNS get a
    /// loopback name server). Default: `/etc/resolv.conf`.
    pub resolv_conf: Option<PathBuf>,
    /// The node's addresses (the kubelet's `--node-ip`): with no resolver
    /// file, a pod in the node's DNS gets a loopback name server of each
    /// of their families. Default: none (IPv4's).
    pub node_ips: Vec<IpAddr>,
}

impl Default for PodDnsConfig {
    fn default() -> Self {
        Self {
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: Some(PathBuf::from(super::host_dns::RESOLV_CONF)),
            node_ips: Vec::new(),
        }
    }
}

/// The kubelet's reason when a cluster-first pod meets a node without
/// cluster name servers.
pub(crate) const MISSING_CLUSTER_DNS: &str = "MissingClusterDNS";
/// The kubelet's reason when a pod's resolver settings were cut.
pub(crate) const DNS_CONFIG_FORMING: &str = "DNSConfigForming";

/// A pod's resolver settings and the warnings (reason, message) made on
/// the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodDns {
    pub(crate) spec: DnsSpec,
    pub(crate) warnings: Vec<(&'static str, String)>,
}

/// What the pod's policy asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cluster,
    Host,
    Nothing,
}

fn kind(pod: &Pod) -> Kind {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    match spec.and_then(|s| s.dns_policy.as_deref()) {
        Some("None") => Kind::Nothing,
        Some("ClusterFirstWithHostNet") => Kind::Cluster,
        Some("Default") => Kind::Host,
        Some("ClusterFirst") | None if host_network => Kind::Host,
        // ClusterFirst off the host's network; an unknown policy falls
        // back to it, as the kubelet's.
        _ => Kind::Cluster,
    }
}

/// The settings of `pod` on a node configured as `config`, whose resolver
/// file reads `host` (from [`super::host_dns::host_dns`]).
pub(crate) fn pod_dns(config: &PodDnsConfig, pod: &Pod, host: DnsSpec) -> PodDns {
    let mut warnings = Vec::new();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut dns = host;
    let mut kind = kind(pod);
    if kind == Kind::Cluster && config.cluster_dns.is_empty() {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        warnings.push((
            MISSING_CLUSTER_DNS,
            format!(
                "pod: \"{name}_{namespace}({uid})\". kubelet does not have ClusterDNS IP \
                 configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \
                 \"Default\" policy."
            ),
        ));
        kind = Kind::Host;
    }
    match kind {
        Kind::Nothing => dns = DnsSpec::default(),
        Kind::Cluster => {
            dns.servers = config.cluster_dns.iter().map(ToString::to_string).collect();
            if !config.cluster_domain.is_empty() {
                let domain = &config.cluster_domain;
                let mut searches = vec![
                    format!("{namespace}.svc.{domain}"),
                    format!("svc.{domain}"),
                    domain.clone(),
                ];
                searches.append(&mut dns.searches);
                dns.searches = once_each(searches);
            }
            dns.options = vec![CLUSTER_OPTIONS.to_string()];
        }
        Kind::Host => {
            if config.resolv_conf.is_none() {
                for ip in &config.node_ips {
                    dns.servers
                        .push(if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.into());
                }
                if dns.servers.is_empty() {
                    dns.servers.push("127.0.0.1".into());
                }
                dns.searches = vec![".".into()];
            }
        }
    }
    if let Some(own) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        // Options are merged by name and value: `name:` is `name`.
        for option in &mut dns.options {
            if option.ends_with(':') && option.matches(':').count() == 1 {
                option.pop();
            }
        }
        dns.servers
            .extend(own.nameservers.iter().flatten().cloned());
        dns.servers = once_each(std::mem::take(&mut dns.servers));
        dns.searches.extend(own.searches.iter().flatten().cloned());
        dns.searches = once_each(std::mem::take(&mut dns.searches));
        for option in own.options.iter().flatten() {
            let name = option.name.as_deref().unwrap_or_default();
            match option.value.as_deref().filter(|v| !v.is_empty()) {
                Some(value) => set_option(&mut dns.options, &format!("{name}:{value}")),
                None => set_option(&mut dns.options, name),
            }
        }
    }
    if dns.servers.len() > MAX_SERVERS {
        dns.servers.truncate(MAX_SERVERS);
        warnings.push((
            DNS_CONFIG_FORMING,
            format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the \
                 applied nameserver line is: {}",
                dns.servers.join(" ")
            ),
        ));
    }
    if let Some(cut) = fit_searches(&mut dns.searches) {
        warnings.push((DNS_CONFIG_FORMING, cut));
    }
    PodDns {
        spec: dns,
        warnings,
    }
}

/// Cuts `searches` to what a resolver takes; the warning when it cut.
fn fit_searches(searches: &mut Vec<String>) -> Option<String> {
    let mut cut = false;
    if searches.len() > MAX_SEARCHES {
        searches.truncate(MAX_SEARCHES);
        cut = true;
    }
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_LENGTH);
    cut |= searches.len() != before;
    let line = |s: &[String]| s.iter().map(String::len).sum::<usize>() + s.len().saturating_sub(1);
    if line(searches) > MAX_SEARCH_CHARS {
        // The last domains go, at least one, until the line fits.
        let mut length = line(searches);
        while let Some(last) = searches.pop() {
            length = length.saturating_sub(last.len() + 1);
            if length <= MAX_SEARCH_CHARS {
                break;
            }
        }
        cut = true;
    }
    cut.then(|| {
        format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied \
             search line is: {}",
            searches.join(" ")
        )
    })
}

/// `items` with each kept at its first place only.
fn once_each(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|item| seen.insert(item.clone()))
        .collect()
}

#[cfg(test)]
mod tests;

//! The DNS settings of a pod in the host's network, as the kubelet gives
//! them to its sandbox (`dnsPolicy` `ClusterFirst` or `Default` on a
//! host-network pod: the host's): read from the node's resolver file
//! (`/etc/resolv.conf`, the kubelet's `--resolv-conf`): every `nameserver`
//! (at most 3), the last `search` line (trailing dots dropped, `.` left
//! out; at most 32 domains), every `options` word once.

use std::path::Path;

use crate::runtime::DnsSpec;

/// The kubelet's default resolver file.
pub(crate) const RESOLV_CONF: &str = "/etc/resolv.conf";
/// The most name servers the kubelet passes.
const MAX_SERVERS: usize = 3;
/// The most search domains the kubelet passes.
const MAX_SEARCHES: usize = 32;

/// The DNS settings of `file`; none when it cannot be read.
pub(crate) fn host_dns(file: &Path) -> Option<DnsSpec> {
    let text = std::fs::read_to_string(file).ok()?;
    Some(parse(&text))
}

fn parse(text: &str) -> DnsSpec {
    let mut dns = DnsSpec::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(str::to_string)),
            Some("search") => {
                dns.searches = words
                    .map(|w| w.trim_end_matches('.').to_string())
                    .filter(|w| !w.is_empty())
                    .collect();
            }
            Some("options") => {
                for option in words {
                    if !dns.options.iter().any(|o| o == option) {
                        dns.options.push(option.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    dns.servers.truncate(MAX_SERVERS);
    dns.searches.truncate(MAX_SEARCHES);
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_resolver_is_read_as_the_kubelet_reads_it() {
        let dns = parse(
            "# comment\nnameserver 10.0.0.2\nsearch old.example\nsearch a.example. . b.example\n\
             options ndots:2 edns0\noptions ndots:2\nnameserver 10.0.0.3\n\
             nameserver 1.1.1.1\nnameserver 8.8.8.8\n",
        );
        assert_eq!(dns.servers, ["10.0.0.2", "10.0.0.3", "1.1.1.1"]);
        assert_eq!(dns.searches, ["a.example", "b.example"]);
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
    }
}

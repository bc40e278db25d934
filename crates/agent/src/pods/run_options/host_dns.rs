//! The node's resolver file (`/etc/resolv.conf`, the kubelet's
//! `resolvConf`) read as the kubelet's DNS configurer reads it: every
//! `nameserver`, the last `search` line (trailing dots dropped, `.` left
//! out), each `options` word by its name (a later value replaces an
//! earlier one). Only lines whose first word is one of these count; a
//! line is a comment only when it starts with `#`. The limits a pod's
//! resolver may hold are applied later, to what the pod gets.

use std::path::Path;

use crate::runtime::DnsSpec;

/// The kubelet's default resolver file.
pub(crate) const RESOLV_CONF: &str = "/etc/resolv.conf";
/// The most of a resolver file read (the kubelet's `maxResolvConfLength`).
const MAX_LENGTH: u64 = 10 << 20;

/// The DNS settings of `file`, none without one (the kubelet's
/// `resolvConf: ""`); an error in the kubelet's words when it cannot be
/// read or a `nameserver` line names none.
pub(crate) fn host_dns(file: Option<&Path>) -> Result<DnsSpec, String> {
    let Some(file) = file else {
        return Ok(DnsSpec::default());
    };
    let text = read(file).map_err(|e| go_error("open", file, &e))?;
    parse(&text)
        .map_err(|e| format!("Encountered error while parsing resolv conf file. Error: {e}"))
}

fn read(file: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(file)?
        .take(MAX_LENGTH + 1)
        .read_to_end(&mut text)?;
    if text.len() as u64 > MAX_LENGTH {
        return Err(std::io::Error::other("the read limit is reached"));
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// An I/O error as Go prints it (`open /etc/resolv.conf: no such file or
/// directory`).
fn go_error(op: &str, file: &Path, e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(cut) => &text[..cut],
        None => &text,
    };
    let mut chars = text.chars();
    let text = match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    };
    format!("{op} {}: {text}", file.display())
}

fn parse(text: &str) -> Result<DnsSpec, String> {
    let mut dns = DnsSpec::default();
    let mut empty_nameserver = false;
    for line in text.split('\n') {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => match words.next() {
                Some(server) => dns.servers.push(server.to_string()),
                None => empty_nameserver = true,
            },
            Some("search") => {
                dns.searches = words
                    .filter(|w| *w != ".")
                    .map(|w| w.strip_suffix('.').unwrap_or(w).to_string())
                    .collect();
            }
            Some("options") => {
                for option in words {
                    set_option(&mut dns.options, option);
                }
            }
            _ => {}
        }
    }
    if empty_nameserver {
        // The kubelet gathers one error per such line; the same message
        // repeated prints once.
        return Err("nameserver list is empty ".into());
    }
    Ok(dns)
}

/// Sets resolver option `option` (`name` or `name:value`) in `options`,
/// replacing one of the same name where it stood.
pub(crate) fn set_option(options: &mut Vec<String>, option: &str) {
    let name = option.split(':').next().unwrap_or_default();
    match options
        .iter_mut()
        .find(|o| o.split(':').next().unwrap_or_default() == name)
    {
        Some(existing) => *existing = option.to_string(),
        None => options.push(option.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_resolver_is_read_as_the_kubelet_reads_it() {
        let dns = parse(
            "# comment\nnameserver 10.0.0.2\nsearch old.example\n  search a.example. . b.example # c\n\
             options ndots:2 edns0\noptions ndots:3\nnameserver 10.0.0.3 10.0.0.9\n\
             nameserver 1.1.1.1\nnameserver 8.8.8.8\n ; nameserver 9.9.9.9\n",
        )
        .unwrap();
        // Every server: the limit is the pod's.
        assert_eq!(dns.servers, ["10.0.0.2", "10.0.0.3", "1.1.1.1", "8.8.8.8"]);
        // A `#` inside a line is a word like any other, as for the kubelet.
        assert_eq!(dns.searches, ["a.example", "b.example", "#", "c"]);
        assert_eq!(dns.options, ["ndots:3", "edns0"]);
    }

    #[test]
    fn a_nameserver_line_without_a_server_is_the_kubelets_error() {
        assert_eq!(
            parse("nameserver\nnameserver 10.0.0.1\nnameserver\n").unwrap_err(),
            "nameserver list is empty "
        );
    }

    #[test]
    fn a_missing_file_is_named_as_go_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("resolv.conf");
        assert_eq!(
            host_dns(Some(&file)).unwrap_err(),
            format!("open {}: no such file or directory", file.display())
        );
        std::fs::write(&file, "nameserver\n").unwrap();
        assert_eq!(
            host_dns(Some(&file)).unwrap_err(),
            "Encountered error while parsing resolv conf file. Error: nameserver list is empty "
        );
        assert_eq!(host_dns(None).unwrap(), DnsSpec::default());
    }
}

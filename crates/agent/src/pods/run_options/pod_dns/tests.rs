// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::*;
use crate::pods::run_options::host_dns::host_dns;

/// The node's resolver file of most cases.
const HOST: &str = "nameserver 10.0.0.2\nnameserver 10.0.0.3\n\
    search corp.example. svc.cluster.local lab.example\noptions ndots:2 timeout:1\n";

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
        "spec": spec,
    }))
    .unwrap()
}

fn cluster(file: &Path) -> PodDnsConfig {
    PodDnsConfig {
        cluster_dns: vec!["10.96.0.10".parse().unwrap()],
        cluster_domain: "cluster.local".into(),
        resolv_conf: Some(file.to_path_buf()),
        node_ips: Vec::new(),
    }
}

/// What we answer, in the oracle's shape (options sorted).
fn ours(config: &PodDnsConfig, pod: &Pod) -> Value {
    match host_dns(config.resolv_conf.as_deref()) {
        Err(e) => json!({"servers": [], "searches": [], "options": [], "events": [], "error": e}),
        Ok(host) => {
            let PodDns { spec, warnings } = pod_dns(config, pod, host);
            let mut options = spec.options;
            options.sort();
            let events: Vec<String> = warnings
                .iter()
                .map(|(reason, message)| format!("{reason}: {message}"))
                .collect();
            json!({"servers": spec.servers, "searches": spec.searches, "options": options,
                   "events": events, "error": ""})
        }
    }
}

/// What the kubelet's own DNS configurer answers for each case.
fn kubelets(cases: &[(PodDnsConfig, Pod)]) -> Vec<Value> {
    let requests: Vec<Value> = cases
        .iter()
        .map(|(config, pod)| {
            json!({
                "pod": pod,
                "cluster_dns": config.cluster_dns.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "cluster_domain": config.cluster_domain,
                "resolv_conf": config.resolv_conf.as_ref().map_or(String::new(), |p| p.display().to_string()),
                "node_ips": config.node_ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })
        })
        .collect();
    let program = nodeplugins_test_support::go_programs::go_program("kubelet-dns");
    let mut child = Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&requests).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kubelet-dns failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_cluster_first_pod_gets_the_cluster_servers_and_search_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("resolv.conf");
    std::fs::write(&file, HOST).unwrap();
    let host = host_dns(Some(&file)).unwrap();
    let got = pod_dns(&cluster(&file), &pod("web", json!({})), host);
    assert_eq!(got.spec.servers, ["10.96.0.10"]);
    assert_eq!(
        got.spec.searches,
        [
            "team.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example",
            "lab.example"
        ]
    );
    assert_eq!(got.spec.options, ["ndots:5"]);
    assert!(got.warnings.is_empty());
}

#[test]
fn every_policy_and_limit_gives_what_the_kubelets_dns_configurer_gives() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("resolv.conf");
    std::fs::write(&file, HOST).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let many_servers = write(
        "many-servers.conf",
        "nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n",
    );
    let searches: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
    let many_searches = write(
        "many-searches.conf",
        &format!("nameserver 10.0.0.1\nsearch {}\n", searches.join(" ")),
    );
    let long: Vec<String> = (0..20)
        .map(|i| format!("{}{i}.example", "x".repeat(120)))
        .collect();
    let long_line = write(
        "long-line.conf",
        &format!(
            "nameserver 10.0.0.1\nsearch {} {}.example\n",
            long.join(" "),
            "y".repeat(250)
        ),
    );
    let empty_server = write("empty-server.conf", "nameserver\nnameserver 10.0.0.1\n");
    let comments = write(
        "comments.conf",
        "# nameserver 9.9.9.9\n  nameserver 10.0.0.7 10.0.0.8\n\
         search a.example. . b.example # note\noptions ndots:1\noptions ndots:4 rotate\r\n",
    );

    let host_net = |policy: &str| json!({"hostNetwork": true, "dnsPolicy": policy});
    let own = json!({
        "nameservers": ["192.0.2.1", "10.0.0.2"],
        "searches": ["own.example", "corp.example"],
        "options": [{"name": "ndots", "value": "3"}, {"name": "rotate"},
                    {"name": "attempts", "value": ""}],
    });
    let base = cluster(&file);
    let no_cluster = PodDnsConfig {
        cluster_dns: Vec::new(),
        ..base.clone()
    };
    let no_domain = PodDnsConfig {
        cluster_domain: String::new(),
        ..base.clone()
    };
    let no_file = |node_ips: &[&str]| PodDnsConfig {
        resolv_conf: None,
        node_ips: node_ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        ..base.clone()
    };
    let with_file = |path: &Path| PodDnsConfig {
        resolv_conf: Some(path.to_path_buf()),
        ..base.clone()
    };
    let cases: Vec<(PodDnsConfig, Pod)> = vec![
        (base.clone(), pod("default-policy", json!({}))),
        (
            base.clone(),
            pod("cluster-first", json!({"dnsPolicy": "ClusterFirst"})),
        ),
        (base.clone(), pod("host-network", host_net("ClusterFirst"))),
        (
            base.clone(),
            pod("with-host-net", host_net("ClusterFirstWithHostNet")),
        ),
        (
            base.clone(),
            pod("default", json!({"dnsPolicy": "Default"})),
        ),
        (base.clone(), pod("unknown", json!({"dnsPolicy": "Bogus"}))),
        (
            base.clone(),
            pod("none", json!({"dnsPolicy": "None", "dnsConfig": own})),
        ),
        (
            base.clone(),
            pod("none-bare", json!({"dnsPolicy": "None", "dnsConfig": {}})),
        ),
        (base.clone(), pod("cluster-own", json!({"dnsConfig": own}))),
        (
            base.clone(),
            pod(
                "default-own",
                json!({"dnsPolicy": "Default", "dnsConfig": own}),
            ),
        ),
        (no_cluster.clone(), pod("missing", json!({}))),
        (
            no_cluster.clone(),
            pod("missing-host-net", host_net("ClusterFirstWithHostNet")),
        ),
        (no_cluster, pod("missing-host", host_net("ClusterFirst"))),
        (no_domain, pod("no-domain", json!({}))),
        (
            no_file(&[]),
            pod("no-file", json!({"dnsPolicy": "Default"})),
        ),
        (
            no_file(&["192.0.2.9", "2001:db8::9"]),
            pod("no-file-dual", json!({"dnsPolicy": "Default"})),
        ),
        (
            no_file(&["2001:db8::9"]),
            pod("no-file-v6", host_net("ClusterFirst")),
        ),
        (no_file(&[]), pod("no-file-cluster", json!({}))),
        (
            with_file(&many_servers),
            pod("many-servers", json!({"dnsPolicy": "Default"})),
        ),
        (
            base.clone(),
            pod(
                "own-servers",
                json!({"dnsPolicy": "None", "dnsConfig": {"nameservers":
                    ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"]}}),
            ),
        ),
        (with_file(&many_searches), pod("many-searches", json!({}))),
        (
            with_file(&many_searches),
            pod("many-searches-host", json!({"dnsPolicy": "Default"})),
        ),
        (with_file(&long_line), pod("long-line", json!({}))),
        (
            with_file(&empty_server),
            pod("empty-server", json!({"dnsPolicy": "Default"})),
        ),
        (
            with_file(&dir.path().join("absent.conf")),
            pod("absent", json!({"dnsPolicy": "None", "dnsConfig": own})),
        ),
        (
            with_file(&comments),
            pod(
                "comments",
                json!({"dnsPolicy": "Default", "dnsConfig": own}),
            ),
        ),
    ];
    let theirs = kubelets(&cases);
    assert_eq!(theirs.len(), cases.len());
    for ((config, pod), theirs) in cases.iter().zip(&theirs) {
        let name = pod.metadata.name.as_deref().unwrap();
        assert_eq!(&ours(config, pod), theirs, "pod {name}");
    }
}

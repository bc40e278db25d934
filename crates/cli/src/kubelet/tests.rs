// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::json;

use super::config_file::{self, ConfigError};
use super::flags::{self, FlagError};
use super::translate::{self, Plan};

fn args(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

fn plan_of(line: &str, files: Option<&Path>, drop_ins: Option<&Path>) -> Plan {
    let given = flags::parse(&args(line)).unwrap();
    let loaded = config_file::load(files, drop_ins).unwrap();
    translate::plan(&given, &loaded).unwrap()
}

fn value<'a>(plan: &'a Plan, name: &str) -> Option<&'a str> {
    plan.values
        .iter()
        .rev()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn flags_are_written_as_the_kubelets_flag_library_reads_them() {
    let given = flags::parse(&args(
        "--config=/etc/k.yaml --v 2 -v=4 --anonymous-auth --fail-swap-on=false \
         --max-pods 20 --node-labels a=b,c=d --register-with-taints=x=y:NoSchedule,z:NoExecute -v5",
    ))
    .unwrap();
    assert_eq!(given.get("config"), Some("/etc/k.yaml"));
    assert_eq!(given.get("v"), Some("5"), "the last one wins");
    assert_eq!(given.get("anonymous-auth"), Some("true"), "a boolean alone");
    assert_eq!(given.get("fail-swap-on"), Some("false"));
    assert_eq!(given.get("max-pods"), Some("20"));
    assert_eq!(given.get("node-labels"), Some("a=b,c=d"));
    let taints = flags::FLAGS
        .iter()
        .find(|f| f.name == "register-with-taints")
        .unwrap();
    assert_eq!(
        flags::to_json(taints, "x=y:NoSchedule,z:NoExecute").unwrap(),
        json!([{"key": "x", "value": "y", "effect": "NoSchedule"}, {"key": "z", "effect": "NoExecute"}])
    );
    assert_eq!(
        flags::parse(&args("--version")).unwrap().get("version"),
        Some("true")
    );
}

#[test]
fn a_flag_the_kubelet_does_not_have_is_an_error_as_upstream() {
    assert_eq!(
        flags::parse(&args("--config /a --no-such-flag")).unwrap_err(),
        FlagError::Unknown("--no-such-flag".into())
    );
    assert_eq!(
        flags::parse(&args("--kubeconfig")).unwrap_err(),
        FlagError::NeedsValue("--kubeconfig".into())
    );
    assert_eq!(
        flags::parse(&args("--config /a extra")).unwrap_err(),
        FlagError::Command("extra".into())
    );
    assert!(matches!(
        flags::parse(&args("--max-pods=many")).unwrap_err(),
        FlagError::Invalid {
            flag: "max-pods",
            ..
        }
    ));
    assert!(matches!(
        flags::parse(&args("-x")).unwrap_err(),
        FlagError::UnknownShorthand('x', _)
    ));
    assert_eq!(
        flags::parse(&args("--no-such-flag"))
            .unwrap_err()
            .to_string(),
        "failed to parse kubelet flag: unknown flag: --no-such-flag"
    );
}

#[test]
fn drop_ins_merge_over_the_file_in_lexical_order_and_relative_paths_are_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         port: 10250\nmaxPods: 50\ntlsCertFile: pki/serving.crt\n\
         authentication:\n  x509:\n    clientCAFile: /etc/kubernetes/pki/ca.crt\n  anonymous:\n    enabled: true\n\
         noSuchField: 1\n",
    )
    .unwrap();
    let drop_ins = dir.path().join("conf.d");
    std::fs::create_dir_all(drop_ins.join("b")).unwrap();
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    std::fs::write(
        drop_ins.join("a.conf"),
        format!("{header}maxPods: 60\nport: 1\n"),
    )
    .unwrap();
    std::fs::write(
        drop_ins.join("b/c.conf"),
        format!("{header}port: 2\nauthentication:\n  anonymous: null\n"),
    )
    .unwrap();
    std::fs::write(drop_ins.join("z.yaml"), "not read: at all\n").unwrap();
    let loaded = config_file::load(Some(&file), Some(&drop_ins)).unwrap();
    assert_eq!(loaded.config["maxPods"], json!(60));
    assert_eq!(loaded.config["port"], json!(2), "b/c.conf after a.conf");
    assert_eq!(
        loaded.config["authentication"],
        json!({"x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}}),
        "a null removes, the rest of the object stays"
    );
    assert_eq!(
        loaded.config["tlsCertFile"],
        json!(dir.path().join("pki/serving.crt").display().to_string())
    );
    assert_eq!(loaded.unknown_fields, ["noSuchField"]);
}

#[test]
fn a_file_of_another_kind_or_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    for text in [
        "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\n",
        "port: 10250\n",
        "- a list\n",
    ] {
        std::fs::write(&file, text).unwrap();
        let error = config_file::load(Some(&file), None).unwrap_err();
        assert!(matches!(error, ConfigError::File { .. }), "{text}: {error}");
    }
}

#[test]
fn without_flags_or_file_the_kubelets_defaults_are_the_agents_settings() {
    let plan = plan_of("--hostname-override Node-1", None, None);
    assert_eq!(value(&plan, "kubelet_server"), Some("0.0.0.0:10250"));
    assert_eq!(value(&plan, "metrics_addr"), Some("127.0.0.1:10248"));
    assert_eq!(
        value(&plan, "container_runtime_endpoint"),
        Some(translate::DEFAULT_RUNTIME_ENDPOINT)
    );
    assert_eq!(value(&plan, "register_node"), Some("on"));
    // Without a file, the kubelet's legacy defaults.
    assert_eq!(value(&plan, "anonymous_auth"), Some("on"));
    assert_eq!(value(&plan, "authorization_mode"), Some("AlwaysAllow"));
    assert_eq!(
        value(&plan, "kubeconfig"),
        Some("off"),
        "standalone, as the kubelet"
    );
    assert_eq!(value(&plan, "node_name"), Some("node-1"));
    assert_eq!(value(&plan, "max_pods"), Some("110"));
    assert_eq!(value(&plan, "log_level"), Some("info"));
    assert!(plan.ignored.is_empty(), "{:?}", plan.ignored);
}

#[test]
fn the_command_line_wins_and_what_is_not_honoured_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         port: 10250\nreadOnlyPort: 0\ncgroupDriver: systemd\nclusterDomain: cluster.local\n\
         cgroupsPerQOS: false\nhealthzPort: 0\nenableDebuggingHandlers: false\n\
         authentication:\n  webhook:\n    cacheTTL: 1m\n  anonymous:\n    enabled: true\n\
         registerWithTaints:\n- key: dedicated\n  value: gpu\n  effect: NoSchedule\n",
    )
    .unwrap();
    let plan = plan_of(
        "--port 11000 --anonymous-auth=false --lock-file /run/lock --v=6 --node-ip 0.0.0.0",
        Some(&file),
        None,
    );
    assert_eq!(value(&plan, "kubelet_server"), Some("0.0.0.0:11000"));
    assert_eq!(value(&plan, "anonymous_auth"), Some("off"));
    assert_eq!(value(&plan, "metrics_addr"), Some("off"), "healthzPort 0");
    assert_eq!(
        value(&plan, "register_with_taints"),
        Some("dedicated=gpu:NoSchedule")
    );
    assert_eq!(value(&plan, "log_level"), Some("trace"));
    assert_eq!(
        value(&plan, "node_ip"),
        None,
        "0.0.0.0 is found from the host"
    );
    assert!(!plan.extras.debugging_handlers);
    assert_eq!(
        plan.extras.token_cache_ttl,
        std::time::Duration::from_secs(60)
    );
    assert_eq!(
        plan.ignored,
        ["cgroupDriver=\"systemd\"", "--lock-file=/run/lock"],
        "cgroupsPerQOS false is what the agent does"
    );
    assert_eq!(plan.extras.read_only, None, "readOnlyPort 0: none");
}

#[test]
fn without_a_config_file_the_kubelets_legacy_defaults_hold_and_the_read_only_port_is_served() {
    // No --config: anonymous requests, no token webhook, AlwaysAllow and
    // the read-only port on 10255, as the kubelet's older command line.
    let plan = plan_of("--address 127.0.0.1", None, None);
    assert_eq!(value(&plan, "anonymous_auth"), Some("on"));
    assert_eq!(value(&plan, "authorization_mode"), Some("AlwaysAllow"));
    assert!(!plan.extras.token_webhook);
    assert_eq!(
        plan.extras.read_only,
        Some("127.0.0.1:10255".parse().unwrap())
    );
    // A flag wins over them.
    let plan = plan_of("--read-only-port 0 --anonymous-auth=false", None, None);
    assert_eq!(plan.extras.read_only, None);
    assert_eq!(value(&plan, "anonymous_auth"), Some("off"));

    // With a file, the file's defaults: none of them.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    )
    .unwrap();
    let plan = plan_of("", Some(&file), None);
    assert_eq!(value(&plan, "anonymous_auth"), Some("off"));
    assert_eq!(value(&plan, "authorization_mode"), Some("Webhook"));
    assert_eq!(plan.extras.read_only, None);
    let plan = plan_of("--read-only-port 10255", Some(&file), None);
    assert_eq!(
        plan.extras.read_only,
        Some("0.0.0.0:10255".parse().unwrap())
    );
    assert!(
        plan.ignored.iter().all(|i| !i.contains("read-only")),
        "{:?}",
        plan.ignored
    );
}

#[test]
fn a_bootstrap_kubeconfig_and_certificate_rotation_are_taken() {
    let given = flags::parse(&args(
        "--kubeconfig /no/such/kubelet.conf --bootstrap-kubeconfig /etc/kubernetes/bootstrap-kubelet.conf --rotate-certificates",
    ))
    .unwrap();
    let plan = translate::plan(&given, &config_file::Loaded::default()).unwrap();
    let value = |name: &str| {
        plan.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(value("kubeconfig"), Some("/no/such/kubelet.conf"));
    assert_eq!(
        value("bootstrap_kubeconfig"),
        Some("/etc/kubernetes/bootstrap-kubelet.conf")
    );
    assert_eq!(value("rotate_certificates"), Some("on"));
    assert!(
        !plan
            .ignored
            .iter()
            .any(|i| i.contains("rotate") || i.contains("bootstrap")),
        "{:?}",
        plan.ignored
    );

    // Without a kubeconfig the kubelet runs standalone and the bootstrap
    // is unused: said.
    let given = flags::parse(&args(
        "--bootstrap-kubeconfig /etc/kubernetes/bootstrap-kubelet.conf",
    ))
    .unwrap();
    let plan = translate::plan(&given, &config_file::Loaded::default()).unwrap();
    assert!(
        plan.ignored
            .iter()
            .any(|i| i.starts_with("--bootstrap-kubeconfig=") && i.contains("standalone")),
        "{:?}",
        plan.ignored
    );
}

#[test]
fn a_wrong_type_is_an_error_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nport: ten\n",
    )
    .unwrap();
    let loaded = config_file::load(Some(&file), None).unwrap();
    let error = translate::plan(&flags::Given::default(), &loaded).unwrap_err();
    assert!(error.to_string().contains("port"), "{error}");
}

#[test]
fn the_plan_makes_the_agents_settings_with_the_kubelets_extras() {
    let mut plan = plan_of(
        "--hostname-override n1 --root-dir /var/lib/kubelet --authorization-webhook-cache-authorized-ttl 1m",
        None,
        None,
    );
    plan.values
        .push(("kubeconfig", "/etc/kubernetes/kubelet.conf".into()));
    let settings = super::settings(&plan).unwrap();
    let server = settings.agent.kubelet_server.as_ref().unwrap();
    assert_eq!(server.addr.to_string(), "0.0.0.0:10250");
    assert_eq!(server.authorized_ttl, std::time::Duration::from_secs(60));
    assert_eq!(
        settings.agent.container_runtime_endpoint.as_deref(),
        Some(translate::DEFAULT_RUNTIME_ENDPOINT)
    );
    let kube = settings.kube.as_ref().unwrap();
    assert!(kube.serve_pods);
    assert!(
        kube.node_registration.is_some(),
        "registerNode defaults to true"
    );
    assert_eq!(
        kube.node_lease_duration,
        Some(std::time::Duration::from_secs(40))
    );
}

#[test]
fn zero_values_are_the_kubelets_defaults_and_the_report_follows_the_update() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         port: 0\nmaxPods: 0\naddress: ''\nsyncFrequency: 0s\nnodeLeaseDurationSeconds: 0\n\
         nodeStatusUpdateFrequency: 4s\n",
    )
    .unwrap();
    let plan = plan_of("", Some(&file), None);
    assert_eq!(value(&plan, "kubelet_server"), Some("0.0.0.0:10250"));
    assert_eq!(value(&plan, "max_pods"), Some("110"));
    assert_eq!(value(&plan, "sync_frequency"), Some("60000ms"));
    assert_eq!(
        plan.extras.lease_duration,
        std::time::Duration::from_secs(40)
    );
    assert_eq!(
        plan.extras.status_update_frequency,
        std::time::Duration::from_secs(4)
    );
    assert_eq!(
        plan.extras.status_report_frequency,
        std::time::Duration::from_secs(4),
        "no report frequency: the update frequency's"
    );
}

#[test]
fn the_pods_dns_settings_are_the_kubelets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         clusterDNS:\n- 10.96.0.10\n- fd00::a\nclusterDomain: cluster.local\n",
    )
    .unwrap();
    let plan = plan_of("", Some(&file), None);
    assert_eq!(value(&plan, "cluster_dns"), Some("10.96.0.10,fd00::a"));
    assert_eq!(value(&plan, "cluster_domain"), Some("cluster.local"));
    assert_eq!(value(&plan, "resolv_conf"), Some("/etc/resolv.conf"));
    assert!(plan.ignored.is_empty(), "{:?}", plan.ignored);
    // The command line wins; an empty resolver file is none, not the
    // default.
    let plan = plan_of(
        "--cluster-dns 10.0.0.10 --cluster-domain example.org --resolv-conf=",
        Some(&file),
        None,
    );
    assert_eq!(value(&plan, "cluster_dns"), Some("10.0.0.10"));
    assert_eq!(value(&plan, "cluster_domain"), Some("example.org"));
    assert_eq!(value(&plan, "resolv_conf"), Some(""));
}

#[test]
fn the_static_pod_path_is_the_kubelets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         staticPodPath: manifests\nfileCheckFrequency: 5s\n",
    )
    .unwrap();
    let plan = plan_of("", Some(&file), None);
    // Relative to the file, as the kubelet resolves it.
    let manifests = dir.path().join("manifests");
    assert_eq!(
        value(&plan, "static_pod_path"),
        Some(manifests.to_str().unwrap())
    );
    assert_eq!(value(&plan, "file_check_frequency"), Some("5000ms"));
    assert!(plan.ignored.is_empty(), "{:?}", plan.ignored);
    // The kubelet's flag wins; without a path, none is followed.
    let plan = plan_of("--pod-manifest-path /etc/k8s/pods", Some(&file), None);
    assert_eq!(value(&plan, "static_pod_path"), Some("/etc/k8s/pods"));
    let plan = plan_of("", None, None);
    assert_eq!(value(&plan, "static_pod_path"), None);
    assert_eq!(value(&plan, "file_check_frequency"), Some("20000ms"));
}

#[test]
fn the_shutdown_grace_periods_are_the_kubelets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n",
    )
    .unwrap();
    let plan = plan_of("", Some(&file), None);
    assert_eq!(value(&plan, "shutdown_grace_period"), Some("30000ms"));
    assert_eq!(
        value(&plan, "shutdown_grace_period_critical_pods"),
        Some("10000ms")
    );
    assert!(plan.ignored.is_empty(), "{:?}", plan.ignored);
    std::fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         shutdownGracePeriodByPodPriority:\n\
         - priority: 100000\n  shutdownGracePeriodSeconds: 20\n\
         - priority: 0\n  shutdownGracePeriodSeconds: 10\n",
    )
    .unwrap();
    let plan = plan_of("", Some(&file), None);
    assert_eq!(
        value(&plan, "shutdown_grace_period_by_pod_priority"),
        Some("100000=20,0=10")
    );
    assert!(plan.ignored.is_empty(), "{:?}", plan.ignored);
    // Off by default, as the kubelet's.
    let plan = plan_of("", None, None);
    assert_eq!(value(&plan, "shutdown_grace_period"), Some("0ms"));
}

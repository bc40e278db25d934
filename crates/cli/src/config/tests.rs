use super::*;

/// What --print-config shows of `s`, written to `path`, reads back to the
/// same settings.
fn assert_reads_back(s: &Settings, path: &Path) {
    std::fs::write(path, s.to_toml()).unwrap();
    let again = Settings::resolve(&RunArgs {
        config: Some(path.to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(again.to_toml(), s.to_toml());
}

#[test]
fn flags_win_over_the_file_and_the_file_over_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodeplugins.toml");
    std::fs::write(
        &path,
        "root_dir = \"/srv/k\"\ndra_cleanup_grace = \"5s\"\nmetrics_addr = \"off\"\nlog_format = \"json\"\n",
    )
    .unwrap();
    let args = RunArgs {
        config: Some(path.clone()),
        dra_cleanup_grace: Some(Duration::from_secs(9)),
        ..Default::default()
    };
    let s = Settings::resolve(&args).unwrap();
    assert_eq!(s.agent.root_dir, PathBuf::from("/srv/k"));
    assert_eq!(s.agent.dra.cleanup_grace, Duration::from_secs(9));
    assert_eq!(s.agent.metrics_addr, None);
    assert_eq!(s.log_format, LogFormat::Json);
    assert_eq!(s.agent.plugins.get_info_timeout, Duration::from_secs(1));
    assert_reads_back(&s, &path);
}

#[test]
fn pods_are_served_with_a_kubeconfig_unless_turned_off() {
    let kubeconfig = Some(KubeconfigSetting::Source(KubeConfigSource::Kubeconfig(
        "/etc/kubernetes/kubelet.conf".into(),
    )));
    let served = Settings::resolve(&RunArgs {
        kubeconfig: kubeconfig.clone(),
        node_name: Some("node-1".into()),
        ..Default::default()
    })
    .unwrap();
    let kube = served.kube.as_ref().unwrap();
    assert!(kube.serve_pods);
    assert_eq!(kube.pod_reconcile_period, Duration::from_secs(60));
    assert_eq!(kube.csinode_recheck, Duration::from_secs(300));
    assert!(served.to_toml().contains("pods = \"on\""));
    let off = Settings::resolve(&RunArgs {
        kubeconfig,
        node_name: Some("node-1".into()),
        pods: Some(Switch(false)),
        pod_reconcile_period: Some(Duration::from_secs(5)),
        csinode_recheck: Some(Duration::from_secs(7)),
        ..Default::default()
    })
    .unwrap();
    let kube = off.kube.as_ref().unwrap();
    assert!(!kube.serve_pods);
    assert_eq!(kube.pod_reconcile_period, Duration::from_secs(5));
    assert_eq!(kube.csinode_recheck, Duration::from_secs(7));
    assert!(off.to_toml().contains("csinode_recheck = \"7s\""));
    assert!(off.to_toml().contains("pods = \"off\""));
    assert!(parse_switch("maybe").is_err());
}

#[test]
fn served_pods_run_on_the_kubelets_runtime_endpoint_unless_simulated_is_asked_for() {
    let kubeconfig = Some(KubeconfigSetting::Source(KubeConfigSource::Kubeconfig(
        "/etc/kubernetes/kubelet.conf".into(),
    )));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodeplugins.toml");
    let served = Settings::resolve(&RunArgs {
        kubeconfig: kubeconfig.clone(),
        node_name: Some("node-1".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        served.agent.container_runtime_endpoint.as_deref(),
        Some("unix:///run/containerd/containerd.sock")
    );
    assert!(
        served
            .to_toml()
            .contains("container_runtime_endpoint = \"unix:///run/containerd/containerd.sock\"")
    );
    assert_reads_back(&served, &path);
    let simulated = Settings::resolve(&RunArgs {
        kubeconfig: kubeconfig.clone(),
        node_name: Some("node-1".into()),
        container_runtime_endpoint: Some(parse_runtime_endpoint("simulated").unwrap()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(simulated.agent.container_runtime_endpoint, None);
    assert!(
        simulated
            .to_toml()
            .contains("container_runtime_endpoint = \"simulated\"")
    );
    assert_reads_back(&simulated, &path);
    // Without pods to run, no runtime is called.
    let off = Settings::resolve(&RunArgs {
        kubeconfig,
        node_name: Some("node-1".into()),
        pods: Some(Switch(false)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(off.agent.container_runtime_endpoint, None);
}

#[test]
fn the_pod_resources_socket_takes_an_octal_mode_or_off() {
    let mode = |text| parse_pod_resources_mode(text).map(|m| m.0);
    assert_eq!(mode("0660"), Ok(Some(0o660)));
    assert_eq!(mode("600"), Ok(Some(0o600)));
    assert_eq!(mode("off"), Ok(None));
    assert!(mode("0400").unwrap_err().contains("read and write"));
    assert!(mode("0999").unwrap_err().contains("octal mode"));
    let args = RunArgs {
        root_dir: Some(PathBuf::from("/srv/k")),
        pod_resources_mode: Some(PodResourcesMode(Some(0o660))),
        ..Default::default()
    };
    let s = Settings::resolve(&args).unwrap();
    let pod_resources = s.agent.pod_resources.as_ref().unwrap();
    assert_eq!(
        pod_resources.socket,
        PathBuf::from("/srv/k/pod-resources/kubelet.sock")
    );
    assert_eq!(pod_resources.mode, 0o660);
    assert!(s.to_toml().contains("pod_resources_mode = \"0660\""));
    let off = RunArgs {
        pod_resources_mode: Some(PodResourcesMode(None)),
        ..args
    };
    assert!(
        Settings::resolve(&off)
            .unwrap()
            .agent
            .pod_resources
            .is_none()
    );
}

#[test]
fn log_levels_and_filters_are_accepted_and_typos_refused() {
    for good in [
        "info",
        "DEBUG",
        "off",
        "info,h2=warn",
        "nodeplugins::dra=trace",
    ] {
        assert_eq!(parse_log_level(good).unwrap(), good);
    }
    for bad in ["verbose", "info,h2", "h2=loud", "=info", ""] {
        let error = parse_log_level(bad).unwrap_err();
        assert!(error.contains("is not a level"), "{bad}: {error}");
    }
}

#[test]
fn unknown_keys_and_bad_values_name_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "get_info_timeout = \"soon\"\n").unwrap();
    let args = RunArgs {
        config: Some(path.clone()),
        ..Default::default()
    };
    let error = format!("{:#}", Settings::resolve(&args).unwrap_err());
    assert!(error.contains("get_info_timeout"), "{error}");
    std::fs::write(&path, "root_directory = \"/x\"\n").unwrap();
    let error = format!("{:#}", Settings::resolve(&args).unwrap_err());
    assert!(error.contains("unknown field"), "{error}");
}

#[test]
fn registering_the_node_takes_the_kubelets_flags_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodeplugins.toml");
    let args = RunArgs {
        kubeconfig: Some(KubeconfigSetting::Source(KubeConfigSource::Kubeconfig(
            "/etc/kubernetes/kubelet.conf".into(),
        ))),
        node_name: Some("node-1".into()),
        register_node: Some(Switch(true)),
        node_ip: Some(parse_node_ips("10.0.0.5,fd00::5").unwrap()),
        node_labels: Some(parse_node_labels("example.com/pool=a").unwrap()),
        register_with_taints: Some(
            parse_taints("example.com/x=y:NoSchedule,only-key:NoExecute").unwrap(),
        ),
        max_pods: Some(50),
        ..Default::default()
    };
    let s = Settings::resolve(&args).unwrap();
    let registration = s.kube.as_ref().unwrap().node_registration.as_ref().unwrap();
    assert_eq!(registration.node_ips.len(), 2);
    assert_eq!(registration.labels["example.com/pool"], "a");
    assert_eq!(registration.taints[1].key, "only-key");
    assert_eq!(registration.taints[1].value, None);
    assert_eq!(registration.max_pods, 50);
    assert_reads_back(&s, &path);
    // Off by default: the Node is someone else's.
    let plain = Settings::resolve(&RunArgs {
        kubeconfig: args.kubeconfig.clone(),
        node_name: Some("node-1".into()),
        ..Default::default()
    })
    .unwrap();
    assert!(plain.kube.unwrap().node_registration.is_none());
}

#[test]
fn registration_flags_refuse_what_the_kubelet_refuses() {
    assert!(parse_node_labels("node-role.kubernetes.io/master=").is_err());
    assert!(parse_node_labels("novalue").is_err());
    assert!(parse_node_ips("10.0.0.1,10.0.0.2").is_err());
    assert!(parse_node_ips("not-an-ip").is_err());
    assert!(parse_taints("k=v:Sometimes").is_err());
    assert!(parse_taints("=v:NoSchedule").is_err());
    assert!(parse_max_pods("0").is_err());
}

#[test]
fn the_pods_dns_settings_reach_the_pods_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodeplugins.toml");
    let args = RunArgs {
        kubeconfig: Some(KubeconfigSetting::Source(KubeConfigSource::Kubeconfig(
            "/etc/kubernetes/kubelet.conf".into(),
        ))),
        node_name: Some("node-1".into()),
        cluster_dns: Some(parse_cluster_dns("10.96.0.10, fd00::a").unwrap()),
        cluster_domain: Some(parse_cluster_domain("cluster.local.").unwrap()),
        resolv_conf: Some(parse_resolv_conf("").unwrap()),
        node_ip: Some(parse_node_ips("10.0.0.5").unwrap()),
        ..Default::default()
    };
    let s = Settings::resolve(&args).unwrap();
    let dns = &s.kube.as_ref().unwrap().pod_dns;
    assert_eq!(dns.cluster_dns.len(), 2);
    assert_eq!(dns.cluster_domain, "cluster.local");
    assert_eq!(dns.resolv_conf, None);
    assert_eq!(dns.node_ips.len(), 1);
    assert_reads_back(&s, &path);
    assert!(parse_cluster_dns("10.96.0.300").is_err());
    assert_eq!(
        parse_resolv_conf("/run/systemd/resolve/resolv.conf").unwrap(),
        ResolvConf(Some("/run/systemd/resolve/resolv.conf".into()))
    );
}

use serde_json::{Value, json};

use super::*;

const GI: i64 = 1024 * 1024 * 1024;

/// A cgroup v1 node with 16 GiB, both huge page sizes and swap accounting.
fn v1_host() -> Host {
    Host {
        memory_capacity: 16 * GI,
        hugepage_sizes: vec!["2MB".into(), "1GB".into()],
        cgroup_v2: false,
        swap_controller: true,
    }
}

fn pod(spec: Value, qos: Option<&str>) -> Pod {
    let mut pod = json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec});
    if let Some(qos) = qos {
        pod["status"] = json!({"qosClass": qos});
    }
    serde_json::from_value(pod).unwrap()
}

fn main_container(pod: &Pod) -> &Container {
    &pod.spec.as_ref().unwrap().containers[0]
}

#[test]
fn a_best_effort_container_gets_the_least_shares_no_limits_and_the_highest_oom_score() {
    let pod = pod(
        json!({"containers": [{"name": "main"}]}),
        Some("BestEffort"),
    );
    let got = container_resources(&pod, main_container(&pod), &v1_host());
    assert_eq!(
        got,
        LinuxResources {
            cpu_shares: 2,
            cpu_period: 100_000,
            cpu_quota: 0,
            memory_limit_in_bytes: 0,
            oom_score_adj: 1000,
            memory_swap_limit_in_bytes: 0,
            hugepage_limits: vec![("2MB".into(), 0), ("1GB".into(), 0)],
            unified: BTreeMap::new(),
        }
    );
}

#[test]
fn a_burstable_container_gets_shares_quota_limit_and_an_oom_score_by_its_request() {
    let pod = pod(
        json!({"containers": [{"name": "main", "resources": {
            "requests": {"cpu": "100m", "memory": "1Gi"},
            "limits": {"cpu": "200m", "memory": "2Gi", "hugepages-2Mi": "4Mi"},
        }}]}),
        Some("Burstable"),
    );
    let got = container_resources(&pod, main_container(&pod), &v1_host());
    // 100 m × 1024 / 1000, rounded down.
    assert_eq!(got.cpu_shares, 102);
    assert_eq!(got.cpu_quota, 20_000);
    assert_eq!(got.memory_limit_in_bytes, 2 * GI);
    // No swap beyond the memory limit.
    assert_eq!(got.memory_swap_limit_in_bytes, 2 * GI);
    // 1000 - 1000 × 1 GiB / 16 GiB, rounded down.
    assert_eq!(got.oom_score_adj, 938);
    assert_eq!(
        got.hugepage_limits,
        vec![("2MB".into(), 4 * 1024 * 1024), ("1GB".into(), 0)]
    );
}

#[test]
fn shares_and_quota_have_the_kubelets_bounds() {
    assert_eq!(shares(0), 2);
    assert_eq!(shares(1), 2);
    assert_eq!(shares(1000), 1024);
    assert_eq!(shares(1_000_000), 262_144);
    assert_eq!(quota(0), 0);
    assert_eq!(quota(5), 1000);
    assert_eq!(quota(1500), 150_000);
}

#[test]
fn without_a_cpu_request_the_limit_gives_the_shares() {
    let pod = pod(
        json!({"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}),
        Some("Burstable"),
    );
    let got = container_resources(&pod, main_container(&pod), &v1_host());
    assert_eq!((got.cpu_shares, got.cpu_quota), (1024, 100_000));
}

#[test]
fn guaranteed_and_node_critical_pods_are_the_last_the_oom_killer_takes() {
    let guaranteed = pod(
        json!({"containers": [{"name": "main", "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "1", "memory": "1Gi"},
        }}]}),
        None,
    );
    let got = container_resources(&guaranteed, main_container(&guaranteed), &v1_host());
    assert_eq!(got.oom_score_adj, -997, "QoS worked out without a status");

    let critical = pod(
        json!({"priority": 2_000_001_000, "priorityClassName": "system-node-critical",
               "containers": [{"name": "main"}]}),
        Some("BestEffort"),
    );
    let got = container_resources(&critical, main_container(&critical), &v1_host());
    assert_eq!(got.oom_score_adj, -997);
}

#[test]
fn burstable_scores_stay_between_the_guaranteed_and_best_effort_ones() {
    let pod_asking = |memory: &str| {
        pod(
            json!({"containers": [{"name": "main", "resources": {
                "requests": {"memory": memory}}}]}),
            Some("Burstable"),
        )
    };
    let all = pod_asking("32Gi");
    assert_eq!(
        container_resources(&all, main_container(&all), &v1_host()).oom_score_adj,
        3
    );
    let tiny = pod_asking("1");
    assert_eq!(
        container_resources(&tiny, main_container(&tiny), &v1_host()).oom_score_adj,
        999
    );
}

#[test]
fn a_sidecar_scores_no_higher_than_the_smallest_app_container() {
    let pod = pod(
        json!({
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"},
                               {"name": "setup"}],
            "containers": [{"name": "main", "resources": {"requests": {"memory": "1Gi"}}}],
        }),
        Some("Burstable"),
    );
    let init = pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap();
    let host = v1_host();
    assert_eq!(
        container_resources(&pod, &init[0], &host).oom_score_adj,
        938
    );
    assert_eq!(
        container_resources(&pod, &init[1], &host).oom_score_adj,
        999,
        "an init container that is not a sidecar: no request, just below BestEffort"
    );
}

#[test]
fn pod_level_resources_fill_in_what_a_container_does_not_set() {
    let pod = pod(
        json!({
            "resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "8Gi", "cpu": "2"}},
            "containers": [{"name": "main"}, {"name": "other",
                "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "2Gi"}}}],
        }),
        Some("Burstable"),
    );
    let host = v1_host();
    let main = container_resources(&pod, main_container(&pod), &host);
    assert_eq!(main.memory_limit_in_bytes, 8 * GI);
    assert_eq!((main.cpu_shares, main.cpu_quota), (2048, 200_000));
    // The 2 GiB the containers do not request, shared by both: 1 GiB each.
    assert_eq!(main.oom_score_adj, 1000 - 1000 * GI / (16 * GI));
    let other = &pod.spec.as_ref().unwrap().containers[1];
    let other = container_resources(&pod, other, &host);
    assert_eq!(other.memory_limit_in_bytes, GI);
    assert_eq!(other.oom_score_adj, 1000 - 1000 * (3 * GI) / (16 * GI));
}

#[test]
fn on_cgroup_v2_the_whole_container_is_killed_on_oom_and_never_swaps() {
    let host = Host {
        cgroup_v2: true,
        ..v1_host()
    };
    let pod = pod(
        json!({"containers": [{"name": "main", "resources": {"limits": {"memory": "1Gi"}}}]}),
        Some("Burstable"),
    );
    let got = container_resources(&pod, main_container(&pod), &host);
    assert_eq!(got.memory_swap_limit_in_bytes, 0);
    let unified: Vec<(&str, &str)> = got
        .unified
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        unified,
        [
            ("memory.high", "max"),
            ("memory.oom.group", "1"),
            ("memory.swap.max", "0")
        ]
    );
}

#[test]
fn huge_page_sizes_are_named_as_the_kubelet_names_them() {
    assert_eq!(hugepage_size("hugepages-2048kB").as_deref(), Some("2MB"));
    assert_eq!(hugepage_size("hugepages-1048576kB").as_deref(), Some("1GB"));
    assert_eq!(hugepage_size("hugepages-64kB").as_deref(), Some("64KB"));
    assert_eq!(hugepage_size("something-else"), None);
}

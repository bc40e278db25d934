//! Whether a container that exited is started again, as the kubelet's
//! `ContainerShouldRestart` decides it with `ContainerRestartRules` (beta,
//! on since 1.35): the container's `restartPolicyRules` first, in order,
//! the first whose exit codes match deciding (`Restart`, or
//! `RestartAllContainers`, which restarts the container here: see the
//! guide); then the container's own `restartPolicy` (`Always`,
//! `OnFailure`, `Never`); then the pod's. Rules count only beside a
//! container-level `restartPolicy`, as the API requires.

use k8s_openapi::api::core::v1::Container;

/// Whether `container` of a pod whose `restartPolicy` is `pod_policy`
/// is started again after exiting with `exit_code`.
pub(crate) fn should_restart(container: &Container, pod_policy: &str, exit_code: i32) -> bool {
    if let Some(own) = container.restart_policy.as_deref() {
        let matched = container
            .restart_policy_rules
            .iter()
            .flatten()
            .find(|rule| {
                rule.exit_codes.as_ref().is_some_and(|codes| {
                    let listed = codes.values.iter().flatten().any(|c| *c == exit_code);
                    match codes.operator.as_str() {
                        "In" => listed,
                        "NotIn" => !listed,
                        _ => false,
                    }
                })
            });
        if let Some(rule) = matched
            && matches!(rule.action.as_str(), "Restart" | "RestartAllContainers")
        {
            return true;
        }
        match own {
            "Always" => return true,
            "OnFailure" => return exit_code != 0,
            "Never" => return false,
            _ => {}
        }
    }
    match pod_policy {
        "OnFailure" => exit_code != 0,
        "Never" => false,
        _ => true,
    }
}

/// Whether `container`, killed because a probe failed, is started again:
/// its own `restartPolicy` is not `Never`, or it has none and the pod's is
/// not (no rule is read: the container did not exit by itself).
pub(crate) fn restarts_after_probe_kill(container: &Container, pod_policy: &str) -> bool {
    match container.restart_policy.as_deref() {
        Some(own) => own != "Never",
        None => pod_policy != "Never",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn container(fields: serde_json::Value) -> Container {
        let mut c = json!({"name": "app"});
        for (k, v) in fields.as_object().unwrap() {
            c[k] = v.clone();
        }
        serde_json::from_value(c).unwrap()
    }

    #[test]
    fn the_pods_policy_decides_unless_the_container_has_its_own() {
        let plain = container(json!({}));
        assert!(should_restart(&plain, "Always", 0));
        assert!(should_restart(&plain, "OnFailure", 1));
        assert!(!should_restart(&plain, "OnFailure", 0));
        assert!(!should_restart(&plain, "Never", 1));
        let never = container(json!({"restartPolicy": "Never"}));
        assert!(!should_restart(&never, "Always", 1));
        let on_failure = container(json!({"restartPolicy": "OnFailure"}));
        assert!(should_restart(&on_failure, "Never", 2));
        assert!(!should_restart(&on_failure, "Always", 0));
        assert!(!restarts_after_probe_kill(&never, "Always"));
        assert!(restarts_after_probe_kill(&on_failure, "Never"));
        assert!(!restarts_after_probe_kill(&plain, "Never"));
    }

    #[test]
    fn the_first_rule_whose_exit_codes_match_restarts_before_the_policy() {
        let ruled = container(json!({
            "restartPolicy": "Never",
            "restartPolicyRules": [
                {"action": "Restart", "exitCodes": {"operator": "In", "values": [42, 43]}},
                {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 1, 42, 43]}},
            ],
        }));
        assert!(should_restart(&ruled, "Never", 42));
        assert!(should_restart(&ruled, "Never", 7), "NotIn matches");
        assert!(
            !should_restart(&ruled, "Never", 1),
            "no rule: the container's Never"
        );
        assert!(!should_restart(&ruled, "Always", 0));
        // Without a container policy the rules are not read.
        let unruled = container(json!({
            "restartPolicyRules": [
                {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}},
            ],
        }));
        assert!(!should_restart(&unruled, "Never", 42));
    }
}

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

#[test]
fn the_query_is_read_as_the_pod_log_options() {
    let query = parse_query(
        "follow=true&timestamps=1&tailLines=5&limitBytes=100&sinceSeconds=60",
        now(),
    )
    .unwrap();
    assert_eq!(
        query,
        LogQuery {
            options: LogOptions {
                since: Some("2024-05-01T09:59:00Z".parse().unwrap()),
                tail: Some(5),
                limit_bytes: Some(100),
                timestamps: true,
                follow: true,
            },
            previous: false,
        }
    );
    let query = parse_query(
        "previous=false&follow=0&sinceTime=2024-04-01T00%3A00%3A00Z",
        now(),
    )
    .unwrap();
    assert!(!query.previous && !query.options.follow);
    assert_eq!(
        query.options.since,
        Some("2024-04-01T00:00:00Z".parse().unwrap())
    );
}

#[test]
fn the_legacy_tail_stands_in_for_tail_lines() {
    assert_eq!(parse_query("tail=3", now()).unwrap().options.tail, Some(3));
    assert_eq!(parse_query("tail=all", now()).unwrap().options.tail, None);
    let tail = |query: &str| parse_query(query, now()).unwrap().options.tail;
    assert_eq!(tail("tail=3&tailLines=7"), Some(3), "tail wins");
    assert_eq!(tail("tail=all&tailLines=7"), None, "all is no tail at all");
    assert_eq!(tail("tail=&tailLines=7"), Some(7), "an empty tail is none");
}

#[test]
fn invalid_options_are_refused_as_the_api_refuses_them() {
    let refused = |query: &str| parse_query(query, now()).unwrap_err();
    assert_eq!(
        refused("tailLines=-1").status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        refused("limitBytes=0").status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        refused("sinceSeconds=0").status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let both = refused("sinceSeconds=5&sinceTime=2024-04-01T00:00:00Z");
    assert_eq!(both.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(both.body(), r#"{"message": "Invalid request."}"#);
    let undecodable = refused("tailLines=x");
    assert_eq!(undecodable.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        undecodable.body(),
        r#"{"message": "Unable to decode query."}"#
    );
    assert_eq!(
        refused("stream=Stdout").status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert!(parse_query("stream=All", now()).is_ok());
}

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}]},
        "status": status,
    }))
    .unwrap()
}

#[test]
fn the_log_is_the_running_or_terminated_containers_and_previous_is_the_last_ones() {
    let running = pod(serde_json::json!({"containerStatuses": [{
        "name": "c", "ready": true, "restartCount": 1, "image": "i", "imageID": "",
        "containerID": "containerd://new",
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}},
    }]}));
    assert_eq!(
        log_container_id(&running, "c", false),
        Ok("new".to_string())
    );
    assert_eq!(log_container_id(&running, "c", true), Ok("old".to_string()));

    let waiting = pod(serde_json::json!({"containerStatuses": [{
        "name": "c", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
        "state": {"waiting": {"reason": "ErrImagePull"}},
    }]}));
    assert_eq!(
        log_container_id(&waiting, "c", false),
        Err("container \"c\" in pod \"p\" is waiting to start: image can't be pulled".to_string())
    );
    assert_eq!(
        log_container_id(&waiting, "c", true),
        Err("previous terminated container \"c\" in pod \"p\" not found".to_string())
    );
    assert_eq!(
        log_container_id(&pod(serde_json::json!({})), "c", false),
        Err("container \"c\" in pod \"p\" is not available".to_string())
    );
}

#[test]
fn form_values_are_decoded() {
    assert_eq!(
        form_urlencoded("command=sh&command=-c&command=echo+a%20b&x"),
        [
            ("command".to_string(), "sh".to_string()),
            ("command".to_string(), "-c".to_string()),
            ("command".to_string(), "echo a b".to_string()),
            ("x".to_string(), String::new()),
        ]
    );
}

//! A container's termination message, against the oracle: the real
//! kubelet v1.37.2 and our agent, each on its own containerd, registered
//! as two nodes of one API server, run the same pods, which never
//! restart:
//!
//! - one writes its message to its `terminationMessagePath` (a path of
//!   its own) and exits 0;
//! - one writes nothing there, logs three lines and exits 2 under
//!   `FallbackToLogsOnError`: its message is its log's last lines;
//! - one does the same under the default policy (`File`): no message.
//!
//! Compared on both nodes: each container's terminated reason, exit code
//! and message.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::two_nodes::{TwoNodes, container, one_container_pod};
use serde_json::{Value, json};

fn pods(node: &str) -> [Value; 3] {
    // One stream only: the runtime writes stdout and stderr to the log
    // as each comes, in no order between them.
    let logs = "echo one; echo two; printf three; exit 2";
    let mut all = [
        one_container_pod(
            node,
            "from-file",
            "printf 'all done' > /tmp/message; exit 0",
            json!({"terminationMessagePath": "/tmp/message"}),
        ),
        one_container_pod(
            node,
            "from-logs",
            logs,
            json!({"terminationMessagePolicy": "FallbackToLogsOnError"}),
        ),
        one_container_pod(node, "no-fallback", logs, json!({})),
    ];
    for pod in &mut all {
        pod["spec"]["restartPolicy"] = json!("Never");
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn a_termination_message_on_our_agent_is_the_real_kubelets() {
    let two = TwoNodes::start().await;
    let mut differences = Vec::new();
    for (ns, node) in two.nodes {
        for pod in pods(node) {
            two.create(ns, &pod).await;
        }
    }
    for name in ["from-file", "from-logs", "no-fallback"] {
        let mut ends = Vec::new();
        for (ns, _) in two.nodes {
            let pod = two
                .pod_when(ns, name, "terminated", |p| {
                    container(p)["state"]["terminated"].is_object()
                })
                .await;
            let t = &container(&pod)["state"]["terminated"];
            ends.push(json!([t["reason"], t["exitCode"], t["message"]]));
        }
        let ends: [Value; 2] = ends.try_into().unwrap();
        if name == "from-file" {
            // The oracle read the file: the comparison is not of two blanks.
            assert_eq!(ends[0][2], "all done", "the kubelet's message");
        }
        TwoNodes::compare(&mut differences, name, ends);
    }
    two.assert_alike(&differences);
}

//! An application that embeds the agent hands it its own `kube::Client`
//! (its TLS stack, its credentials): the agent publishes through it as
//! through a client it built from a kubeconfig.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodeplugins::agent::{Agent, AgentConfig};
use nodeplugins::kube_api::{KubeApiConfig, KubeConfigSource};
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_publishes_through_the_applications_own_client() {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start("node-1").await;
    let node =
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}});
    api.admin("POST", "/api/v1/nodes", Some(&node)).await;
    let client = api.client(Identity::Node).await;
    let root = tempfile::tempdir().unwrap();
    let mut kube = KubeApiConfig::new(KubeConfigSource::Client(client), "node-1");
    kube.serve_pods = false;
    let agent = Agent::with_kube_api(AgentConfig::new(root.path()), kube)
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(agent.run(shutdown.clone()));
    // The kubelet makes its node's CSINode; the agent does, through the
    // client it was given.
    eventually("the node's CSINode", TIMEOUT, || async {
        let csinode = api
            .request(
                Identity::Admin,
                "GET",
                "/apis/storage.k8s.io/v1/csinodes/node-1",
                None,
            )
            .await;
        (csinode.status == 200).then_some(())
    })
    .await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

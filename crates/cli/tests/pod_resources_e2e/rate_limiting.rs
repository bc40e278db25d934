//! A client that never reads holds up nobody, and bursts are refused as by
//! the kubelet's rate limit.

use tokio::time::Instant;

use nodeplugins_api::podresources::v1;
use nodeplugins_api::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

use super::common::agent;
use super::{RESOURCE, check_list, cli_json, device_plugin, dra_driver, metric, socket, train_pod};

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_holds_up_nobody_and_bursts_are_limited_as_by_the_kubelet() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let _plugin = device_plugin(root.path());
    let _driver = dra_driver(root.path());
    let (devices, claim) = train_pod(root.path()).await;
    let socket = socket(root.path());

    // A refused call is answered with headers too (trailers-only): the
    // client below tells it from a started answer, and never calls it stalled.
    let mut command = python_env().script("pod_resources_stall.py");
    command
        .arg(&socket)
        .args(["--calls", "2", "--path", "/v1.PodResourcesLister/Nope"]);
    let mut refused = ChildProcess::spawn_with_stdin("pod_resources_stall.py", command);
    for _ in 0..2 {
        let line = refused
            .wait_for_line(TIMEOUT, |l| l == "STALLED" || l.starts_with("REFUSED"))
            .await;
        // grpc-status 12: Unimplemented.
        assert!(
            line.starts_with("REFUSED") && line.ends_with(" 12"),
            "{line}"
        );
    }
    refused.close_stdin();
    refused.wait(TIMEOUT).await;
    assert!(
        !refused.output().iter().any(|l| l == "STALLED"),
        "{:?}",
        refused.output()
    );

    // Five List calls on a connection that grants no room for an answer:
    // each answer started (headers sent, no grpc-status) and held up.
    let mut command = python_env().script("pod_resources_stall.py");
    command.arg(&socket).args(["--calls", "5"]);
    let mut stalled = ChildProcess::spawn_with_stdin("pod_resources_stall.py", command);
    let line = stalled
        .wait_for_line(TIMEOUT, |l| l == "STALLED" || l.starts_with("REFUSED"))
        .await;
    assert_eq!(line, "STALLED", "{:?}", stalled.output());

    // Meanwhile: other clients are answered, and the agent allocates.
    let printed = cli_json(root.path(), &["pod-resources"]).await;
    check_list(&printed, &devices, &claim);
    let other = cli_json(
        root.path(),
        &[
            "allocate",
            "--pod",
            "uid-other",
            "--container",
            "c",
            &format!("{RESOURCE}=1"),
        ],
    )
    .await;
    assert_eq!(
        other["allocations"][0]["devices"].as_array().unwrap().len(),
        1
    );
    let printed = cli_json(root.path(), &["pod-resources"]).await;
    assert_eq!(printed["pod_resources"].as_array().unwrap().len(), 2);
    assert!(
        !stalled.output().iter().any(|l| l == "GOT_DATA"),
        "{:?}",
        stalled.output()
    );
    stalled.close_stdin();
    stalled.wait(TIMEOUT).await;

    // A burst of 40 calls at once: the bucket (10, refilled at 100 a second)
    // lets few through; the rest are refused at once, as by the kubelet.
    let channel = nodeplugins_api::transport::dial(&socket, TIMEOUT)
        .await
        .unwrap();
    let client = PodResourcesListerClient::new(channel);
    let started = Instant::now();
    let calls = (0..40).map(|_| {
        let mut client = client.clone();
        async move { client.list(v1::ListPodResourcesRequest {}).await }
    });
    let results = futures::future::join_all(calls).await;
    let elapsed = started.elapsed();
    let refused: Vec<&tonic::Status> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let passed = results.len() - refused.len();
    for status in &refused {
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert_eq!(status.message(), "rejected by rate limit");
    }
    let allowed = 10 + (elapsed.as_millis() / 10) as usize + 1;
    assert!(
        !refused.is_empty() && passed <= allowed,
        "{passed} of 40 passed in {elapsed:?}"
    );
    assert_eq!(
        metric(root.path(), "nodeplugins_pod_resources_rate_limited_total").await,
        refused.len() as u64
    );
    // The bucket fills again.
    eventually("a call passes again", TIMEOUT, || {
        let mut client = client.clone();
        async move { client.list(v1::ListPodResourcesRequest {}).await.ok() }
    })
    .await;
}

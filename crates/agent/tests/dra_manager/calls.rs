//! Prepare and unprepare calls: both API versions, a claim from two drivers,
//! a renamed pod, an unimplemented service, a hanging plugin, concurrent calls,
//! a claim whose unprepare failed.

use std::time::Duration;

use nodeplugins::dra::{ClaimPod, DraError};
use nodeplugins_api::constants::dra_service;
use nodeplugins_sdk::dra_driver::ApiVersions;
use nodeplugins_test_support::fake_dra_driver::{FakeDraDriver, FakeDraOptions};

use super::{DRIVER, Node, both, claim, prepared_by};

#[tokio::test]
async fn prepare_and_unprepare_work_through_both_api_versions() {
    let node = Node::start(|_| {});
    for (version, versions, services) in [
        (
            "v1",
            ApiVersions {
                v1: true,
                v1beta1: false,
            },
            vec![dra_service::V1.to_string()],
        ),
        (
            "v1beta1",
            ApiVersions {
                v1: false,
                v1beta1: true,
            },
            vec![dra_service::V1BETA1.to_string()],
        ),
    ] {
        let mut options = FakeDraOptions::new(DRIVER, version);
        options.api_versions = versions;
        let plugin = node.driver_with(options).await;
        node.manager
            .register(DRIVER, &plugin.endpoint(), &services)
            .await
            .unwrap();
        plugin.behaviour().fail.insert("bad".into());
        plugin.behaviour().omit.insert("lost".into());

        let claims = [claim("ok"), claim("bad"), claim("lost")];
        let prepared = node.manager.prepare(DRIVER, &claims).await.unwrap();
        assert_eq!(prepared.len(), 3, "{version}");
        let ok = &prepared[0];
        assert_eq!(ok.claim, claims[0]);
        assert_eq!(ok.error, None, "{version}");
        assert_eq!(ok.devices[0].device, "dev-ok");
        assert_eq!(ok.devices[0].pool, "pool");
        assert_eq!(ok.devices[0].request_names, ["req"]);
        assert_eq!(
            ok.devices[0].cdi_device_ids,
            ["test.example.com/dev=dev-ok"]
        );
        // share_id exists only in v1.
        let share = (version == "v1").then(|| format!("share-{version}"));
        assert_eq!(ok.devices[0].share_id, share, "{version}");
        assert_eq!(
            prepared[1].error.as_deref(),
            Some(format!("{version} refuses bad").as_str())
        );
        assert!(prepared[1].devices.is_empty());
        assert!(
            prepared[2].error.as_deref().unwrap().contains("no result"),
            "{version}"
        );

        let unprepared = node.manager.unprepare(DRIVER, &claims).await.unwrap();
        assert_eq!(unprepared[0].error, None, "{version}");
        assert!(unprepared[1].error.is_some());
        assert!(unprepared[2].error.is_some());
        let calls = plugin.calls().borrow().clone();
        assert_eq!(calls.iter().filter(|(op, _)| op == "unprepare").count(), 3);
        node.manager.deregister(DRIVER, &plugin.endpoint()).await;
    }
}

#[tokio::test]
async fn a_claim_from_two_drivers_is_unprepared_by_both_and_fails_naming_the_one_that_failed() {
    const NIC: &str = "nic.example.com";
    let node = Node::start(|_| {});
    let gpu = node.driver("gpu").await;
    let nic = node.driver_with(FakeDraOptions::new(NIC, "nic")).await;
    for (driver, plugin) in [(DRIVER, &gpu), (NIC, &nic)] {
        node.manager
            .register(driver, &plugin.endpoint(), &both())
            .await
            .unwrap();
    }
    let shared = [claim("shared")];
    for driver in [DRIVER, NIC] {
        let prepared = node.manager.prepare(driver, &shared).await.unwrap();
        assert_eq!(prepared[0].error, None, "{driver}");
    }
    let drivers = |node: &Node| -> Vec<String> {
        let claims = node.manager.prepared_claims();
        claims.into_iter().map(|c| c.driver).collect()
    };
    assert_eq!(drivers(&node), [DRIVER, NIC], "one record per driver");

    // The NIC driver fails: the claim fails naming it; the GPU driver's part
    // is unprepared and forgotten, the NIC driver's is kept for a retry.
    nic.behaviour().fail.insert("shared".into());
    let unprepared = node.manager.unprepare_recorded(&shared).await;
    let error = unprepared[0].error.as_deref().unwrap();
    assert!(error.starts_with(&format!("DRA driver {NIC}: ")), "{error}");
    assert!(!error.contains(DRIVER), "{error}");
    assert_eq!(drivers(&node), [NIC]);
    let unprepare_calls = |plugin: &FakeDraDriver| {
        let calls = plugin.calls().borrow().clone();
        calls.iter().filter(|(op, _)| op == "unprepare").count()
    };
    assert_eq!((unprepare_calls(&gpu), unprepare_calls(&nic)), (1, 1));

    nic.behaviour().fail.clear();
    let unprepared = node.manager.unprepare_recorded(&shared).await;
    assert_eq!(unprepared[0].error, None);
    assert!(drivers(&node).is_empty());
    assert_eq!(
        (unprepare_calls(&gpu), unprepare_calls(&nic)),
        (1, 2),
        "only the driver that still had it"
    );
}

#[tokio::test]
async fn a_prepare_naming_a_known_pod_uid_with_another_name_is_refused() {
    let node = Node::start(|_| {});
    let plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    let pod = |name: &str| ClaimPod::new("pod-uid", name, vec!["main".into()]);
    let first = node
        .manager
        .prepare_for_pod(DRIVER, &[claim("one")], &pod("train"))
        .await
        .unwrap();
    assert_eq!(first[0].error, None);

    let renamed = node
        .manager
        .prepare_for_pod(DRIVER, &[claim("two")], &pod("serve"))
        .await;
    assert_eq!(
        renamed,
        Err(DraError::PodRenamed {
            pod: "pod-uid".into(),
            known: "default/train".into(),
            given: "default/serve".into(),
        })
    );
    assert_eq!(
        renamed.unwrap_err().to_string(),
        "pod pod-uid is default/train, not default/serve"
    );
    let prepares = plugin
        .calls()
        .borrow()
        .iter()
        .filter(|(op, _)| op == "prepare")
        .count();
    assert_eq!(
        prepares, 1,
        "the driver is not called for a refused prepare"
    );
    let records = node.manager.prepared_claims();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].pods, [pod("train")]);
}

#[tokio::test]
async fn a_plugin_without_the_chosen_service_answers_unimplemented() {
    let node = Node::start(|_| {});
    let mut options = FakeDraOptions::new(DRIVER, "v1only");
    options.api_versions = ApiVersions {
        v1: true,
        v1beta1: false,
    };
    let plugin = node.driver_with(options).await;
    // It claims v1beta1 but does not serve it.
    node.manager
        .register(
            DRIVER,
            &plugin.endpoint(),
            &[dra_service::V1BETA1.to_string()],
        )
        .await
        .unwrap();
    let error = node
        .manager
        .prepare(DRIVER, &[claim("1")])
        .await
        .unwrap_err();
    match error {
        DraError::Call {
            code, operation, ..
        } => {
            assert_eq!(code, tonic::Code::Unimplemented);
            assert_eq!(operation, "NodePrepareResources");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_hanging_plugin_gets_deadline_exceeded_and_the_agent_goes_on() {
    let node = Node::start(|c| c.call_timeout = Duration::from_millis(300));
    let plugin = node.driver("slow").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    plugin.behaviour().hang = true;
    let error = node
        .manager
        .prepare(DRIVER, &[claim("1")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            DraError::Call {
                code: tonic::Code::DeadlineExceeded,
                ..
            }
        ),
        "{error:?}"
    );
    // The connection survives a timed-out call.
    plugin.behaviour().hang = false;
    assert_eq!(prepared_by(&node, "2").await, "share-slow");
    assert_eq!(node.status().await.unwrap().instances[0].connects, 1);
}

#[tokio::test]
async fn concurrent_calls_and_the_health_stream_share_one_connection() {
    let node = Node::start(|_| {});
    let mut options = FakeDraOptions::new(DRIVER, "a");
    options.health = true;
    let plugin = node.driver_with(options).await;
    let mut services = both();
    services.push(dra_service::HEALTH_V1.into());
    node.manager
        .register(DRIVER, &plugin.endpoint(), &services)
        .await
        .unwrap();
    let calls = (0..16).map(|i| {
        let manager = node.manager.clone();
        async move { manager.prepare(DRIVER, &[claim(&i.to_string())]).await }
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap()[0].error, None);
    }
    node.wait("health reported", |s| {
        s.is_some_and(|s| !s.devices.is_empty())
    })
    .await;
    assert_eq!(node.status().await.unwrap().instances[0].connects, 1);
    assert_eq!(plugin.calls().borrow().len(), 16);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_claims_prepared_and_unprepared_at_once_through_the_agent_all_succeed() {
    let node = Node::start(|_| {});
    // The driver keeps its record on disk, read and written by each call.
    let mut options = FakeDraOptions::new(DRIVER, "a");
    options.claims_on_disk = true;
    let plugin = node.driver_with(options).await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    let prepares = (0..100).map(|i| {
        let manager = node.manager.clone();
        async move { manager.prepare(DRIVER, &[claim(&i.to_string())]).await }
    });
    for result in futures::future::join_all(prepares).await {
        assert_eq!(result.unwrap()[0].error, None);
    }
    let unprepares = (0..100).map(|i| {
        let manager = node.manager.clone();
        async move { manager.unprepare(DRIVER, &[claim(&i.to_string())]).await }
    });
    for result in futures::future::join_all(unprepares).await {
        assert_eq!(result.unwrap()[0].error, None);
    }
    let left = node.manager.unprepare_recorded(&[claim("0")]).await;
    assert!(left[0].error.is_some(), "nothing is left recorded");
}

#[tokio::test]
async fn a_claim_whose_unprepare_failed_stays_out_of_reach_until_it_is_unprepared_then_is_prepared_afresh()
 {
    let node = Node::start(|_| {});
    let plugin = node.driver("a").await;
    node.manager
        .register(DRIVER, &plugin.endpoint(), &both())
        .await
        .unwrap();
    let shared = [claim("shared")];
    let pod = |uid: &str, name: &str| ClaimPod::new(uid, name, vec!["main".into()]);
    let calls = |op: &str| {
        let calls = plugin.calls().borrow().clone();
        calls.iter().filter(|(o, _)| o == op).count()
    };
    let first = node
        .manager
        .prepare_for_pod(DRIVER, &shared, &pod("old-uid", "old"))
        .await
        .unwrap();
    assert_eq!(first[0].error, None);

    // The claim's last pod goes and its unprepare fails.
    plugin.behaviour().fail.insert("shared".into());
    let unprepared = node.manager.unprepare_pod("old-uid").await.unwrap();
    assert!(unprepared[0].error.is_some(), "{unprepared:?}");
    assert_eq!(calls("unprepare"), 1);

    // A new pod naming the claim is refused: it does not get the old
    // prepare, and the driver is not called.
    let refused = node
        .manager
        .prepare_for_pod(DRIVER, &shared, &pod("new-uid", "new"))
        .await;
    assert_eq!(
        refused,
        Err(DraError::ClaimUnpreparing {
            claim: "claim-shared".into()
        })
    );
    assert_eq!(calls("prepare"), 1, "no call for a refused prepare");
    let records = node.manager.prepared_claims();
    assert_eq!(
        records[0].pods,
        [pod("old-uid", "old")],
        "the new pod is not recorded"
    );

    // The driver heals: unpreparing the old pod again calls it again, and
    // the claim is forgotten; the new pod's prepare calls the driver anew.
    plugin.behaviour().fail.clear();
    let unprepared = node.manager.unprepare_pod("old-uid").await.unwrap();
    assert_eq!(unprepared[0].error, None, "{unprepared:?}");
    assert_eq!(calls("unprepare"), 2, "the failed unprepare is sent again");
    assert!(node.manager.prepared_claims().is_empty());
    let again = node
        .manager
        .prepare_for_pod(DRIVER, &shared, &pod("new-uid", "new"))
        .await
        .unwrap();
    assert_eq!(again[0].error, None);
    assert_eq!(calls("prepare"), 2, "prepared afresh for the new pod");
}

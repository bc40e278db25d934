//! The SDK's CSI node driver serving volumes over a real socket: a
//! persistent volume staged, then published as a bind mount that shows
//! the volume's files (read-only when asked), refused when published from
//! another staging path, unpublished (the mount and the target gone); an
//! inline volume made at its publish and gone at its unpublish; the
//! volume's stats read; every call written to the call log, secrets by
//! key only.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodeplugins_api::csi::v1 as csi;
use nodeplugins_api::csi::v1::node_client::NodeClient;
use nodeplugins_api::transport::{BoundSocket, dial, serve};
use nodeplugins_sdk::csi_driver::CsiNodeDriver;
use tokio_util::sync::CancellationToken;
use tonic::Code;

fn mounted(path: &std::path::Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

fn capability() -> Option<csi::VolumeCapability> {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    Some(csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    })
}

#[tokio::test]
async fn volumes_are_staged_published_as_bind_mounts_and_unpublished() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(state.join("vol-1")).unwrap();
    std::fs::write(state.join("vol-1/hello"), "from the driver").unwrap();
    let log = dir.path().join("calls.jsonl");
    let driver = CsiNodeDriver::new("csi.example.com", "node-a")
        .volumes(&state, true)
        .call_log(&log)
        .unwrap();
    let socket = dir.path().join("csi.sock");
    let shutdown = CancellationToken::new();
    let bound = BoundSocket::bind(&socket, None).await.unwrap();
    tokio::spawn(serve(bound, driver.router(), shutdown.clone()));
    let mut node = NodeClient::new(dial(&socket, Duration::from_secs(5)).await.unwrap());

    let staging = dir.path().join("staging/globalmount");
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: "vol-1".into(),
        staging_target_path: staging.display().to_string(),
        volume_capability: capability(),
        secrets: [("password".to_string(), "hunter2".to_string())].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let target = dir.path().join("pod/mount");
    let publish = |target: &std::path::Path, staging: &std::path::Path, readonly| {
        csi::NodePublishVolumeRequest {
            volume_id: "vol-1".into(),
            staging_target_path: staging.display().to_string(),
            target_path: target.display().to_string(),
            volume_capability: capability(),
            readonly,
            ..Default::default()
        }
    };
    let refused = node
        .node_publish_volume(publish(&target, &dir.path().join("elsewhere"), false))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    node.node_publish_volume(publish(&target, &staging, true))
        .await
        .unwrap();
    assert!(mounted(&target));
    assert_eq!(
        std::fs::read_to_string(target.join("hello")).unwrap(),
        "from the driver"
    );
    assert!(
        std::fs::write(target.join("new"), b"x").is_err(),
        "published read-only"
    );
    // Published again at the same place: nothing changes.
    node.node_publish_volume(publish(&target, &staging, true))
        .await
        .unwrap();
    let stats = node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: "vol-1".into(),
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.usage.len(), 2);
    assert!(stats.usage.iter().all(|u| u.total > 0));
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: "vol-1".into(),
        target_path: target.display().to_string(),
    })
    .await
    .unwrap();
    assert!(!mounted(&target) && !target.exists());
    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: "vol-1".into(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .unwrap();
    assert!(
        state.join("vol-1/hello").exists(),
        "a persistent volume stays"
    );

    // An inline volume: made at its publish, gone at its unpublish.
    let inline = dir.path().join("inline/mount");
    let mut request = publish(&inline, std::path::Path::new(""), false);
    request.volume_id = "csi-abc".into();
    request.staging_target_path = String::new();
    request.volume_context = [(
        "csi.storage.k8s.io/ephemeral".to_string(),
        "true".to_string(),
    )]
    .into();
    node.node_publish_volume(request).await.unwrap();
    std::fs::write(inline.join("x"), b"inline").unwrap();
    assert!(state.join("csi-abc/x").exists());
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: "csi-abc".into(),
        target_path: inline.display().to_string(),
    })
    .await
    .unwrap();
    assert!(!state.join("csi-abc").exists());

    let text = std::fs::read_to_string(&log).unwrap();
    let methods: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["method"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        methods,
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodePublishVolume",
            "NodePublishVolume",
            "NodeGetVolumeStats",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
        ]
    );
    assert!(text.contains("\"secrets\":[\"password\"]"), "{text}");
    assert!(
        !text.contains("hunter2"),
        "a secret's value is never written"
    );
    assert!(text.contains("FailedPrecondition"), "{text}");
    shutdown.cancel();
}

//! A deleted pod-resources socket is served again, private, and counted.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use nodeplugins_test_support::wait::{TIMEOUT, eventually};

use super::common::agent;
use super::{cli_json, metric, socket};

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_socket_comes_back_private_and_is_counted() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let socket = socket(root.path());
    // Served once it accepts a connection: the file shows between the
    // socket's bind and its listen, when a connection is refused.
    let accepts = |socket: &Path| std::os::unix::net::UnixStream::connect(socket).is_ok();
    eventually("the socket served", TIMEOUT, || async {
        accepts(&socket).then_some(())
    })
    .await;
    let before = cli_json(root.path(), &["pod-resources"]).await;
    assert_eq!(
        metric(
            root.path(),
            "nodeplugins_pod_resources_socket_recreations_total"
        )
        .await,
        0
    );

    // Gone once removed: whatever is at the path afterwards was bound again.
    std::fs::remove_file(&socket).unwrap();
    eventually("the socket served again", TIMEOUT, || async {
        accepts(&socket).then_some(())
    })
    .await;
    // Answered: the new socket is served, which it is only once its mode is set.
    let after = cli_json(root.path(), &["pod-resources"]).await;
    assert_eq!(after, before, "the same answers on the new socket");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600, "the socket is private again");
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    assert!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert_eq!(
        metric(
            root.path(),
            "nodeplugins_pod_resources_socket_recreations_total"
        )
        .await,
        1
    );
}

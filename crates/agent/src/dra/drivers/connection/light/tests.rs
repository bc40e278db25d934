// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A server's SETTINGS with one setting (MAX_CONCURRENT_STREAMS = 100).
const SERVER_SETTINGS: [u8; 15] = [0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x3, 0, 0, 0, 100];
/// The client's SETTINGS, as it must be on the wire: ENABLE_PUSH = 0.
const CLIENT_SETTINGS_FRAME: [u8; 15] = [0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x2, 0, 0, 0, 0];
const SETTINGS: u8 = kind::SETTINGS;
const PING: u8 = kind::PING;
const GOAWAY: u8 = kind::GOAWAY;
const ACK: u8 = flag::ACK;

/// A scripted server: accepts one connection and checks the client's
/// preface and SETTINGS.
async fn accept(listener: &UnixListener) -> UnixStream {
    let (mut stream, _) = tokio::time::timeout(TIMEOUT, listener.accept())
        .await
        .unwrap()
        .unwrap();
    let mut hello = [0u8; PREFACE.len() + CLIENT_SETTINGS_FRAME.len()];
    stream.read_exact(&mut hello).await.unwrap();
    assert_eq!(&hello[..PREFACE.len()], PREFACE);
    assert_eq!(&hello[PREFACE.len()..], CLIENT_SETTINGS_FRAME);
    stream
}

async fn read_frame(stream: &mut UnixStream) -> (u8, u8, Vec<u8>) {
    let mut header = [0u8; HEADER_LEN];
    tokio::time::timeout(TIMEOUT, stream.read_exact(&mut header))
        .await
        .unwrap()
        .unwrap();
    let mut payload = vec![0u8; FrameHeader::parse(&header).len];
    stream.read_exact(&mut payload).await.unwrap();
    (header[3], header[4], payload)
}

fn listener() -> (tempfile::TempDir, Arc<Path>, UnixListener) {
    let dir = tempfile::tempdir().unwrap();
    let path: Arc<Path> = Arc::from(dir.path().join("dra.sock"));
    let listener = UnixListener::bind(&path).unwrap();
    (dir, path, listener)
}

#[tokio::test]
async fn settings_and_pings_are_answered_and_goaway_ends_it() {
    let (_dir, path, listener) = listener();
    let server = async {
        let mut s = accept(&listener).await;
        s.write_all(&SERVER_SETTINGS).await.unwrap();
        assert_eq!(read_frame(&mut s).await, (SETTINGS, ACK, vec![]));
        // A PING split across writes, then SETTINGS again.
        let ping = [0, 0, 8, PING, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        s.write_all(&ping[..5]).await.unwrap();
        s.flush().await.unwrap();
        tokio::task::yield_now().await;
        s.write_all(&ping[5..]).await.unwrap();
        assert_eq!(
            read_frame(&mut s).await,
            (PING, ACK, vec![1, 2, 3, 4, 5, 6, 7, 8])
        );
        s.write_all(&SERVER_SETTINGS).await.unwrap();
        assert_eq!(read_frame(&mut s).await, (SETTINGS, ACK, vec![]));
        // GOAWAY, NO_ERROR... then ENHANCE_YOUR_CALM (0xb).
        s.write_all(&[0, 0, 8, GOAWAY, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb])
            .await
            .unwrap();
        s
    };
    let client = async {
        let mut c = LightConnection::handshake(&path).await.unwrap();
        tokio::time::timeout(TIMEOUT, c.closed()).await.unwrap()
    };
    let (_server, end) = tokio::join!(server, client);
    assert!(matches!(end, ConnectionEnd::GoAway(11)), "{end:?}");
    assert_eq!(
        end.to_string(),
        "the plugin is closing the connection (GOAWAY, error code 11)"
    );
}

#[tokio::test]
async fn waiting_is_cancel_safe() {
    // Dropping `closed()` between the halves of a frame loses nothing.
    let (_dir, path, listener) = listener();
    let (to_server, mut step) = tokio::sync::mpsc::unbounded_channel::<()>();
    let server = async {
        let mut s = accept(&listener).await;
        s.write_all(&SERVER_SETTINGS).await.unwrap();
        read_frame(&mut s).await;
        let ping = [0, 0, 8, PING, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9];
        s.write_all(&ping[..12]).await.unwrap();
        step.recv().await.unwrap();
        s.write_all(&ping[12..]).await.unwrap();
        assert_eq!(read_frame(&mut s).await, (PING, ACK, vec![9; 8]));
        drop(s);
    };
    let client = async {
        let mut c = LightConnection::handshake(&path).await.unwrap();
        // Give the half frame time to arrive, then drop the wait.
        let first = tokio::time::timeout(Duration::from_millis(50), c.closed()).await;
        assert!(first.is_err(), "half a frame ends nothing");
        to_server.send(()).unwrap();
        tokio::time::timeout(TIMEOUT, c.closed()).await.unwrap()
    };
    let ((), end) = tokio::join!(server, client);
    assert!(matches!(end, ConnectionEnd::Closed), "{end:?}");
    assert_eq!(end.to_string(), "the plugin closed the connection");
}

#[tokio::test]
async fn a_server_that_answers_with_something_else_fails_the_handshake() {
    let (_dir, path, listener) = listener();
    let server = async {
        let mut s = accept(&listener).await;
        // A PING where SETTINGS must come first.
        s.write_all(&[0, 0, 8, PING, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        s
    };
    let (_server, result) = tokio::join!(server, LightConnection::handshake(&path));
    let error = result.unwrap_err().to_string();
    assert!(
        error.contains("first frame is of type 0x6, not SETTINGS"),
        "{error}"
    );
}

#[tokio::test]
async fn a_server_that_closes_before_answering_fails_the_handshake() {
    let (_dir, path, listener) = listener();
    let server = async { drop(accept(&listener).await) };
    let ((), result) = tokio::join!(server, LightConnection::handshake(&path));
    let error = result.unwrap_err().to_string();
    assert!(
        error.ends_with("closed the connection before answering"),
        "{error}"
    );
}

#[tokio::test]
async fn an_oversized_frame_ends_the_connection() {
    let (_dir, path, listener) = listener();
    let server = async {
        let mut s = accept(&listener).await;
        s.write_all(&SERVER_SETTINGS).await.unwrap();
        read_frame(&mut s).await;
        // 16385 bytes announced: more than a client allows by default.
        s.write_all(&[0, 0x40, 0x01, 0x0, 0, 0, 0, 0, 1])
            .await
            .unwrap();
        s
    };
    let client = async {
        let mut c = LightConnection::handshake(&path).await.unwrap();
        tokio::time::timeout(TIMEOUT, c.closed()).await.unwrap()
    };
    let (_server, end) = tokio::join!(server, client);
    assert!(
        matches!(end, ConnectionEnd::FrameTooLarge(16385)),
        "{end:?}"
    );
    assert!(end.to_string().contains("16385 bytes"), "{end}");
}

#[tokio::test]
async fn a_missing_socket_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let error = LightConnection::handshake(&Arc::from(dir.path().join("none.sock")))
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Dial { .. }), "{error:?}");
    assert!(error.to_string().starts_with("dial "), "{error}");
}

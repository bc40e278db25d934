//! The TCP probe: a connection to the port opened within the timeout and
//! closed at once; nothing is sent or read.

use std::time::Duration;

use tokio::net::TcpStream;

use super::verdict::{Handled, Verdict, connect_error, join_host_port};

/// Connects to `host:port` within `timeout`.
pub(super) async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Handled {
    let address = join_host_port(host, port);
    match tokio::time::timeout(timeout, TcpStream::connect(&address)).await {
        Ok(Ok(stream)) => {
            drop(stream);
            Ok((Verdict::Success, String::new()))
        }
        Ok(Err(e)) => Ok((
            Verdict::Failure,
            format!("dial tcp {address}: {}", connect_error(&e)),
        )),
        Err(_) => Ok((Verdict::Failure, format!("dial tcp {address}: i/o timeout"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listening_port_succeeds_and_a_closed_one_fails_in_gos_words() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let timeout = Duration::from_secs(1);
        assert_eq!(
            tcp_probe("127.0.0.1", port, timeout).await,
            Ok((Verdict::Success, String::new()))
        );
        drop(listener);
        assert_eq!(
            tcp_probe("127.0.0.1", port, timeout).await,
            Ok((
                Verdict::Failure,
                format!("dial tcp 127.0.0.1:{port}: connect: connection refused")
            ))
        );
    }
}

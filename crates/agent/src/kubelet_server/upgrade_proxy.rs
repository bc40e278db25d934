//! An upgraded connection spliced to the runtime's streaming server, as
//! the kubelet's upgrade-aware proxy splices it: the user's request (its
//! headers, its query) sent to the runtime's URL on a connection of its
//! own; the runtime's answer given back as it is; and on a
//! `101 Switching Protocols`, the two connections' bytes copied both
//! ways, each side's end of input passed on as a half-close, until both
//! are done. A request that is no upgrade is refused: the runtime's
//! streaming server speaks nothing else.

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::reply::{self, Reply};

/// Whether `request` asks to upgrade its connection (`Connection:
/// Upgrade`).
pub(crate) fn is_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// What went wrong on the way to the runtime (the kubelet's responder
/// answers each with a 500 and its text).
fn failed(message: String) -> Reply {
    tracing::warn!(error = %message, "error while proxying a stream to the runtime");
    reply::http_error(StatusCode::INTERNAL_SERVER_ERROR, &message)
}

/// Proxies the upgrade `request` to the runtime's `url`.
pub(crate) async fn proxy(mut request: Request<Incoming>, url: &str) -> Reply {
    if !is_upgrade(&request) {
        return failed("Upgrade request required".to_string());
    }
    let target: http::Uri = match url.parse() {
        Ok(uri) => uri,
        Err(e) => return failed(format!("the runtime's URL {url:?}: {e}")),
    };
    if target.scheme_str() != Some("http") {
        return failed(format!(
            "the runtime's URL {url:?}: only plain HTTP streaming servers are supported"
        ));
    }
    let Some(authority) = target.authority().cloned() else {
        return failed(format!("the runtime's URL {url:?} has no host"));
    };
    let port = authority.port_u16().unwrap_or(80);
    let stream = match TcpStream::connect((authority.host(), port)).await {
        Ok(stream) => stream,
        Err(e) => return failed(format!("error dialing backend: {e}")),
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => return failed(format!("error dialing backend: {e}")),
        };
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "the runtime's stream connection");
        }
    });

    // The runtime's path, the user's query.
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{}?{query}", target.path()),
        None => target.path().to_string(),
    };
    let mut backend = Request::builder()
        .method(request.method().clone())
        .uri(path_and_query);
    for (name, value) in request.headers() {
        // The user's credentials stay here.
        if name == header::AUTHORIZATION || name == header::HOST {
            continue;
        }
        backend = backend.header(name, value);
    }
    backend = backend.header(header::HOST, authority.as_str());
    let backend = match backend.body(Empty::<Bytes>::new()) {
        Ok(backend) => backend,
        Err(e) => return failed(format!("the request to the runtime: {e}")),
    };
    let client_upgrade = hyper::upgrade::on(&mut request);
    let mut answer = match sender.send_request(backend).await {
        Ok(answer) => answer,
        Err(e) => return failed(format!("error proxying to the runtime: {e}")),
    };
    let status = answer.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        // The runtime's refusal, as it gave it.
        let (parts, body) = answer.into_parts();
        let body = body.map_err(std::io::Error::other).boxed();
        return http::Response::from_parts(parts, body);
    }
    let backend_upgrade = hyper::upgrade::on(&mut answer);
    let mut reply = http::Response::new(reply::empty());
    *reply.status_mut() = status;
    *reply.headers_mut() = answer.headers().clone();
    tokio::spawn(async move {
        let (client, backend) = match tokio::try_join!(client_upgrade, backend_upgrade) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "a stream's upgrade did not complete");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut backend = TokioIo::new(backend);
        match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            Ok((up, down)) => tracing::debug!(up, down, "a stream ended"),
            Err(e) => tracing::debug!(error = %e, "a stream ended"),
        }
    });
    reply
}

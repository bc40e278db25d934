//! The HTTP GET of probes and lifecycle hooks, as the kubelet's: a GET of
//! the path on the host and port (HTTPS without verifying the server's
//! certificate), with the handler's headers, a `User-Agent` of the
//! kubelet's version (`kube-probe/1.37`, `kube-lifecycle/1.37`) and
//! `Accept: */*` unless given (an `Accept` given empty is left out), no
//! keep-alive; redirects followed to the same host name only, at most ten.
//! A probe's whole exchange, redirects and body included, is within its
//! timeout; 2xx is success, a 3xx not followed a success with a warning,
//! anything else a failure naming the status code (never the body). A
//! hook has no timeout and fails only when no answer came. An HTTPS
//! handshake answered in plain HTTP fails in Go's words.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::verdict::{Handled, MAX_OUTPUT, Verdict, connect_error, join_host_port};

/// The kubelet's probe user agent, of its major and minor version.
pub(crate) const PROBE_AGENT: &str = "kube-probe/1.37";
/// The kubelet's lifecycle hook user agent.
pub(crate) const HOOK_AGENT: &str = "kube-lifecycle/1.37";
/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;

/// One HTTP GET of a probe or hook.
pub(crate) struct HttpGet<'a> {
    pub(crate) https: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: &'a str,
    pub(crate) headers: &'a [(String, String)],
    /// The `User-Agent` sent unless the headers name one.
    pub(crate) agent: &'static str,
}

/// The last answer of a GET, redirects followed.
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// At most 10 KiB of it.
    pub(crate) body: String,
}

/// Why a GET has no answer.
pub(crate) enum FetchError {
    /// No answer: Go's `Get "<url>": <error>`.
    Request(String),
    /// The answer's body could not be read.
    Body(String),
}

impl HttpGet<'_> {
    /// The URL first asked.
    fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let path = if self.path.starts_with('/') {
            self.path.to_string()
        } else {
            format!("/{}", self.path)
        };
        format!("{scheme}://{}{path}", join_host_port(&self.host, self.port))
    }
}

/// Probes `get` within `timeout`.
pub(super) async fn http_probe(get: &HttpGet<'_>, timeout: Duration) -> Handled {
    let url = get.url();
    let mut last_url = url.clone();
    let answer = match tokio::time::timeout(timeout, follow(get, &url, &mut last_url)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(FetchError::Request(e))) => return Ok((Verdict::Failure, e)),
        Ok(Err(FetchError::Body(e))) => return Err(("failure", e)),
        Err(_) => {
            return Ok((
                Verdict::Failure,
                format!(
                    "Get {last_url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                ),
            ));
        }
    };
    let status = answer.status;
    Ok(match status {
        200..=299 => (Verdict::Success, answer.body),
        300..=399 => (
            Verdict::Warning,
            format!("Probe terminated redirects, Response body: {}", answer.body),
        ),
        _ => (
            Verdict::Failure,
            format!("HTTP probe failed with statuscode: {status}"),
        ),
    })
}

/// GETs `get` with no time limit, as a lifecycle hook does: any answer
/// (whatever its status) is one.
pub(crate) async fn http_fetch(get: &HttpGet<'_>) -> Result<Answer, FetchError> {
    let url = get.url();
    let mut last_url = url.clone();
    follow(get, &url, &mut last_url).await
}

/// GETs `url`, following the redirects the kubelet follows; `last_url` is
/// the one asked last.
async fn follow(get: &HttpGet<'_>, url: &str, last_url: &mut String) -> Result<Answer, FetchError> {
    let first = url
        .parse::<Uri>()
        .map_err(|e| FetchError::Request(format!("parse {url:?}: {e}")))?;
    let first_host = first.host().unwrap_or_default().to_string();
    let mut uri = first;
    let mut redirects = 0;
    loop {
        *last_url = uri.to_string();
        let response = match exchange(get, &uri).await {
            Ok(response) => response,
            Err(e) => return Err(FetchError::Request(format!("Get {:?}: {e}", last_url))),
        };
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get(http::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| resolve(&uri, l));
        if (300..400).contains(&status)
            && let Some(next) = location
            && next.host().unwrap_or_default() == first_host
        {
            if redirects >= MAX_REDIRECTS {
                return Err(FetchError::Request(format!(
                    "Get {:?}: stopped after {MAX_REDIRECTS} redirects",
                    next.to_string()
                )));
            }
            redirects += 1;
            uri = next;
            continue;
        }
        let body = match Limited::new(response.into_body(), MAX_OUTPUT)
            .collect()
            .await
        {
            Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
            // The limit reached is no error: what came is the body.
            Err(e) if e.is::<http_body_util::LengthLimitError>() => String::new(),
            Err(e) => return Err(FetchError::Body(e.to_string())),
        };
        return Ok(Answer { status, body });
    }
}

/// One request and its response (its body still to read).
async fn exchange(
    get: &HttpGet<'_>,
    uri: &Uri,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let address = join_host_port(host, port);
    let tcp = TcpStream::connect(&address)
        .await
        .map_err(|e| format!("dial tcp {address}: {}", connect_error(&e)))?;
    let authority = uri
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_else(|| address.clone());
    let path = uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.to_string());
    let mut request = Request::get(path);
    let mut host_header = authority;
    let mut user_agent = true;
    let mut accept = Some("*/*".to_string());
    for (name, value) in get.headers {
        if name.eq_ignore_ascii_case("host") {
            host_header = value.clone();
        } else if name.eq_ignore_ascii_case("accept") {
            accept = None;
            if !value.is_empty() {
                request = request.header(name.as_str(), value.as_str());
            }
        } else {
            if name.eq_ignore_ascii_case("user-agent") {
                user_agent = false;
            }
            request = request.header(name.as_str(), value.as_str());
        }
    }
    request = request.header(http::header::HOST, host_header);
    if user_agent {
        request = request.header(http::header::USER_AGENT, get.agent);
    }
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    let request = request
        .header(http::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    if https {
        let first = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recording = Recording {
            inner: tcp,
            first: first.clone(),
        };
        let stream = match tls_connect(recording, host).await {
            Ok(stream) => stream,
            Err(e) => {
                let answered_plain = first
                    .lock()
                    .map(|bytes| bytes.as_slice() == b"HTTP/")
                    .unwrap_or(false);
                return Err(if answered_plain {
                    PLAIN_ANSWER.to_string()
                } else {
                    e
                });
            }
        };
        send(TokioIo::new(stream), request).await
    } else {
        send(TokioIo::new(tcp), request).await
    }
}

async fn send<I>(
    io: I,
    request: Request<Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}

/// Go's error for a TLS handshake answered in plain HTTP (the first five
/// bytes back `HTTP/`), which a lifecycle hook tries again over HTTP.
pub(crate) const PLAIN_ANSWER: &str = "http: server gave HTTP response to HTTPS client";

/// A TCP stream that keeps the first five bytes the server sent, to tell a
/// handshake answered in plain HTTP as Go's client tells it.
struct Recording {
    inner: TcpStream,
    first: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl tokio::io::AsyncRead for Recording {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Ok(mut first) = this.first.lock()
            && first.len() < 5
        {
            let new = &buf.filled()[before..];
            let take = (5 - first.len()).min(new.len());
            first.extend_from_slice(&new[..take]);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Recording {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A TLS connection over `tcp` that accepts any server certificate, as the
/// kubelet's probes do (`InsecureSkipVerify`).
async fn tls_connect(
    tcp: Recording,
    host: &str,
) -> Result<tokio_rustls::client::TlsStream<Recording>, String> {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .ok_or("no TLS crypto provider installed")?;
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}

/// Accepts every certificate; still checks the handshake's signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Where a `Location` sends a request of `base`: absolute, or a path on
/// the same scheme and authority (relative to `base`'s directory when it
/// does not start with `/`).
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().ok();
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?;
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}").parse().ok();
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    format!("{scheme}://{authority}{path}").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server answering each connection with the next of `answers`
    /// (status line and headers, then a body), and the requests it read.
    async fn server(answers: Vec<String>) -> (u16, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut requests = Vec::new();
            for answer in answers {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = vec![0; 4096];
                let n = stream.read(&mut buf).await.unwrap();
                requests.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                stream.write_all(answer.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
            }
            requests
        });
        (port, task)
    }

    fn answer(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn get<'a>(port: u16, path: &'a str, headers: &'a [(String, String)]) -> HttpGet<'a> {
        HttpGet {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path,
            headers,
            agent: PROBE_AGENT,
        }
    }

    #[tokio::test]
    async fn a_2xx_succeeds_with_the_kubelets_headers_and_a_5xx_fails_by_its_code() {
        let (port, server) = server(vec![
            answer("200 OK", "", "fine"),
            answer("503 Service Unavailable", "", "secret body"),
        ])
        .await;
        let headers = vec![("X-Custom".to_string(), "yes".to_string())];
        let timeout = Duration::from_secs(2);
        let ok = http_probe(&get(port, "/healthz?x=1", &headers), timeout).await;
        assert_eq!(ok, Ok((Verdict::Success, "fine".to_string())));
        let failed = http_probe(&get(port, "/healthz", &[]), timeout).await;
        assert_eq!(
            failed,
            Ok((
                Verdict::Failure,
                "HTTP probe failed with statuscode: 503".to_string()
            ))
        );
        let requests = server.await.unwrap();
        let first = requests[0].to_lowercase();
        assert!(
            first.starts_with("get /healthz?x=1 http/1.1\r\n"),
            "{first}"
        );
        for header in [
            format!("host: 127.0.0.1:{port}"),
            "user-agent: kube-probe/1.37".into(),
            "accept: */*".into(),
            "x-custom: yes".into(),
            "connection: close".into(),
        ] {
            assert!(first.contains(&header), "{header} not in {first}");
        }
    }

    #[tokio::test]
    async fn a_redirect_to_another_host_is_a_warning_and_one_to_the_same_host_is_followed() {
        let (port, server) = server(vec![
            answer("302 Found", "Location: /elsewhere\r\n", ""),
            answer("200 OK", "", "there"),
            answer(
                "301 Moved",
                "Location: http://example.invalid/\r\n",
                "moved",
            ),
        ])
        .await;
        let timeout = Duration::from_secs(2);
        let followed = http_probe(&get(port, "/", &[]), timeout).await;
        assert_eq!(followed, Ok((Verdict::Success, "there".to_string())));
        let warned = http_probe(&get(port, "/", &[]), timeout).await;
        assert_eq!(
            warned,
            Ok((
                Verdict::Warning,
                "Probe terminated redirects, Response body: moved".to_string()
            ))
        );
        let requests = server.await.unwrap();
        assert!(
            requests[1].starts_with("GET /elsewhere "),
            "{}",
            requests[1]
        );
    }

    #[tokio::test]
    async fn nothing_listening_fails_with_the_url_and_gos_dial_error() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let failed = http_probe(&get(port, "/x", &[]), Duration::from_secs(1)).await;
        assert_eq!(
            failed,
            Ok((
                Verdict::Failure,
                format!(
                    "Get \"http://127.0.0.1:{port}/x\": dial tcp 127.0.0.1:{port}: connect: connection refused"
                )
            ))
        );
    }
}

//! What the `:authority` layer costs.
//!
//! 1. The rewriter alone, per request of a long grpc-go connection (first
//!    request inserts its headers into the dynamic table, later ones refer to
//!    them by index, each followed by a DATA frame): with a valid authority
//!    (blocks forwarded verbatim) and with a path-valued one (rewritten and
//!    re-encoded).
//! 2. A unary gRPC round trip over a Unix socket through our server, against
//!    the same service on a stock tonic server.
//!
//! Run: `cargo bench -p nodeplugins-api --bench authority`
// Benchmark and test code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use bytes::BytesMut;
use nodeplugins_api::pluginregistration::v1::registration_client::RegistrationClient;
use nodeplugins_api::pluginregistration::v1::{InfoRequest, PluginInfo};
use nodeplugins_api::transport::authority::AuthorityRewriter;
use nodeplugins_api::transport::{BoundSocket, dial, serve};
use nodeplugins_test_support::fake_plugin::registration_service;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use nodeplugins_api::transport::frame::PREFACE;

fn frame(out: &mut Vec<u8>, frame_type: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        frame_type,
        flags,
    ]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

fn literal(out: &mut Vec<u8>, s: &[u8]) {
    assert!(s.len() < 127);
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

/// A request as grpc-go encodes it: the first inserts every field into the
/// dynamic table, later ones are all indexed references.
fn request(stream: u32, authority: &[u8], first: bool) -> Vec<u8> {
    let fields: [(&[u8], &[u8]); 7] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/pluginregistration.Registration/GetInfo"),
        (b":authority", authority),
        (b"content-type", b"application/grpc"),
        (b"user-agent", b"grpc-go/1.72.0"),
        (b"te", b"trailers"),
    ];
    let mut block = Vec::new();
    for (i, (name, value)) in fields.iter().enumerate() {
        if first {
            block.push(0x40);
            literal(&mut block, name);
            literal(&mut block, value);
        } else {
            // Newest entry is 62; the last field inserted is the newest.
            block.push(0x80 | (62 + (fields.len() - 1 - i)) as u8);
        }
    }
    let mut out = Vec::new();
    frame(&mut out, 0x1, 0x4, stream, &block);
    frame(&mut out, 0x0, 0x1, stream, &[0, 0, 0, 0, 0]);
    out
}

fn rewriter_ns_per_request(authority: &[u8], requests: u32) -> f64 {
    let mut connection = PREFACE.to_vec();
    for i in 0..requests {
        connection.extend(request(1 + 2 * i, authority, i == 0));
    }
    let mut best = f64::MAX;
    for _ in 0..7 {
        let mut rewriter = AuthorityRewriter::new();
        let mut out = BytesMut::with_capacity(connection.len() * 2);
        let start = Instant::now();
        for chunk in connection.chunks(16 * 1024) {
            rewriter.feed(chunk, &mut out).unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(rewriter.stats().blocks, u64::from(requests));
        best = best.min(elapsed.as_nanos() as f64 / f64::from(requests));
    }
    best
}

async fn round_trips(ours: bool, calls: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.sock");
    let info = PluginInfo {
        r#type: "CSIPlugin".into(),
        name: "bench.example.com".into(),
        ..Default::default()
    };
    let (service, _) = registration_service(info);
    let router = tonic::transport::Server::builder().add_service(service);
    let shutdown = CancellationToken::new();
    if ours {
        let bound = BoundSocket::bind(&path, None).await.unwrap();
        tokio::spawn(serve(bound, router, shutdown.clone()));
    } else {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        tokio::spawn(
            router.serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned()),
        );
    }
    let mut client = RegistrationClient::new(dial(&path, Duration::from_secs(5)).await.unwrap());
    for _ in 0..500 {
        client.get_info(InfoRequest {}).await.unwrap();
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        client.get_info(InfoRequest {}).await.unwrap();
        samples.push(start.elapsed());
    }
    shutdown.cancel();
    samples.sort();
    samples
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let requests = 100_000;
    let valid = rewriter_ns_per_request(b"localhost", requests);
    let path = rewriter_ns_per_request(
        b"var/lib/kubelet/plugins_registry/example.com-reg.sock",
        requests,
    );
    println!("rewriter, {requests} requests on one connection (best of 7):");
    println!("  valid authority (forwarded verbatim):  {valid:7.0} ns/request");
    println!("  path authority (rewritten, re-encoded): {path:7.0} ns/request");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let calls = 20_000;
    // Round 0 warms up; rounds 1-3 alternate the two servers so drift hits both.
    for round in 0..4 {
        for (label, ours) in [
            ("stock tonic server      ", false),
            ("nodeplugins transport   ", true),
        ] {
            let samples = runtime.block_on(round_trips(ours, calls));
            let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
            if round > 0 {
                println!(
                    "round {round}: unary GetInfo, {label} {calls} calls: p50 {:>6.1} us  p99 {:>6.1} us  mean {:>6.1} us",
                    percentile(&samples, 0.5).as_secs_f64() * 1e6,
                    percentile(&samples, 0.99).as_secs_f64() * 1e6,
                    mean.as_secs_f64() * 1e6,
                );
            }
        }
    }
}

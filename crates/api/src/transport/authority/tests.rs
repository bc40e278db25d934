use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::transport::hpack::HeaderField;

/// A client-side HPACK encoder that indexes and Huffman-codes like real
/// clients do, so the rewriter's table mirror is exercised.
struct ClientEncoder {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
}

impl ClientEncoder {
    fn new() -> Self {
        Self {
            entries: Vec::new(),
            size: 0,
            max: 4096,
        }
    }

    fn find(&self, name: &[u8], value: &[u8]) -> (Option<usize>, Option<usize>) {
        let mut name_index = None;
        for (i, (n, v)) in super::super::hpack::static_entries().iter().enumerate() {
            if *n == name && *v == value {
                return (Some(i + 1), Some(i + 1));
            }
            if *n == name && name_index.is_none() {
                name_index = Some(i + 1);
            }
        }
        for (i, (n, v)) in self.entries.iter().enumerate() {
            if n == name && v == value {
                return (Some(62 + i), Some(62 + i));
            }
            if n == name && name_index.is_none() {
                name_index = Some(62 + i);
            }
        }
        (None, name_index)
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + 32;
        self.entries.insert(0, (name.to_vec(), value.to_vec()));
        self.size += size;
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max {
            let (n, v) = self.entries.pop().unwrap();
            self.size -= n.len() + v.len() + 32;
        }
    }

    fn string(out: &mut Vec<u8>, s: &[u8], huffman: bool) {
        if huffman {
            let coded = crate::transport::hpack::huffman_encode(s);
            crate::transport::hpack::encode_int_for_tests(coded.len(), 7, 0x80, out);
            out.extend_from_slice(&coded);
        } else {
            crate::transport::hpack::encode_int_for_tests(s.len(), 7, 0, out);
            out.extend_from_slice(s);
        }
    }

    fn encode(&mut self, fields: &[(&[u8], &[u8])], rng: &mut StdRng) -> Vec<u8> {
        let mut out = Vec::new();
        if rng.random_ratio(1, 8) {
            let size = [0usize, 256, 4096][rng.random_range(0..3)];
            self.max = size;
            self.size = self
                .entries
                .iter()
                .map(|(n, v)| n.len() + v.len() + 32)
                .sum();
            self.evict();
            crate::transport::hpack::encode_int_for_tests(size, 5, 0x20, &mut out);
            if size < 4096 && rng.random_bool(0.5) {
                self.max = 4096;
                crate::transport::hpack::encode_int_for_tests(4096, 5, 0x20, &mut out);
            }
        }
        for &(name, value) in fields {
            let huffman = rng.random_bool(0.5);
            match self.find(name, value) {
                (Some(index), _) => {
                    crate::transport::hpack::encode_int_for_tests(index, 7, 0x80, &mut out)
                }
                (None, name_index) => {
                    let mode = rng.random_range(0..3);
                    let (prefix, flags) = match mode {
                        0 => (6, 0x40),
                        1 => (4, 0x00),
                        _ => (4, 0x10),
                    };
                    match name_index {
                        Some(i) => crate::transport::hpack::encode_int_for_tests(
                            i, prefix, flags, &mut out,
                        ),
                        None => {
                            out.push(flags);
                            Self::string(&mut out, name, huffman);
                        }
                    }
                    Self::string(&mut out, value, huffman);
                    if mode == 0 {
                        self.insert(name, value);
                    }
                }
            }
        }
        out
    }
}

fn frame(out: &mut Vec<u8>, frame_type: u8, flags: u8, stream_id: u32, payload: &[u8]) {
    FrameHeader {
        len: payload.len(),
        kind: frame_type,
        flags,
        stream_id,
    }
    .put(out);
    out.extend_from_slice(payload);
}

/// Writes a header block as HEADERS plus CONTINUATION frames split at random,
/// with random padding and priority.
fn header_frames(
    out: &mut Vec<u8>,
    stream_id: u32,
    block: &[u8],
    end_stream: bool,
    rng: &mut StdRng,
) {
    let mut cuts: Vec<usize> = (0..rng.random_range(0..3))
        .map(|_| rng.random_range(0..=block.len()))
        .collect();
    cuts.sort_unstable();
    cuts.push(block.len());
    let mut start = 0;
    for (i, &end) in cuts.iter().enumerate() {
        let last = i == cuts.len() - 1;
        let piece = &block[start..end];
        start = end;
        if i == 0 {
            let mut flags = if end_stream { flag::END_STREAM } else { 0 };
            let mut payload = Vec::new();
            let pad = if rng.random_bool(0.3) {
                Some(rng.random_range(0..20u8))
            } else {
                None
            };
            if let Some(pad) = pad {
                flags |= flag::PADDED;
                payload.push(pad);
            }
            if rng.random_bool(0.3) {
                flags |= flag::PRIORITY;
                payload.extend_from_slice(&[0x80, 0, 0, 0, 15]);
            }
            payload.extend_from_slice(piece);
            if let Some(pad) = pad {
                payload.extend(std::iter::repeat_n(0u8, usize::from(pad)));
            }
            if last {
                flags |= flag::END_HEADERS;
            }
            frame(out, kind::HEADERS, flags, stream_id, &payload);
        } else {
            frame(
                out,
                kind::CONTINUATION,
                if last { flag::END_HEADERS } else { 0 },
                stream_id,
                piece,
            );
        }
    }
}

fn request(authority: &[u8], path: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (b":method".to_vec(), b"POST".to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (b":path".to_vec(), path.to_vec()),
        (b":authority".to_vec(), authority.to_vec()),
        (b"content-type".to_vec(), b"application/grpc".to_vec()),
        (b"user-agent".to_vec(), b"grpc-go/1.72.0".to_vec()),
        (b"te".to_vec(), b"trailers".to_vec()),
    ]
}

fn run(input: &[u8], chunk: usize) -> Result<(Vec<u8>, AuthorityRewriter), RewriteError> {
    let mut rewriter = AuthorityRewriter::new();
    let mut out = BytesMut::new();
    for piece in input.chunks(chunk.max(1)) {
        rewriter.feed(piece, &mut out)?;
    }
    Ok((out.to_vec(), rewriter))
}

fn fields_of(blocks: &[Vec<HeaderField>]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    blocks
        .iter()
        .map(|b| {
            b.iter()
                .map(|f| (f.name.to_vec(), f.value.to_vec()))
                .collect()
        })
        .collect()
}

fn as_refs(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<(&[u8], &[u8])> {
    fields
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect()
}

const GO_AUTHORITY: &[u8] = b"var/lib/kubelet/plugins_registry/example.com-reg.sock";

#[test]
fn valid_authority_passes_through_byte_for_byte() {
    let mut rng = StdRng::seed_from_u64(1);
    let mut input = PREFACE.to_vec();
    frame(&mut input, 0x4, 0, 0, &[]);
    let fields = request(b"localhost", b"/pluginregistration.Registration/GetInfo");
    let block = ClientEncoder::new().encode(&as_refs(&fields), &mut rng);
    header_frames(&mut input, 1, &block, false, &mut rng);
    frame(&mut input, 0x0, 0x1, 1, &[0, 0, 0, 0, 0]);
    let (out, rewriter) = run(&input, input.len()).unwrap();
    assert_eq!(out, input);
    assert_eq!(
        rewriter.stats(),
        RewriteStats {
            blocks: 1,
            rewritten: 0
        }
    );
    assert!(!rewriter.is_reencoding());
}

#[test]
fn path_authority_is_replaced_with_localhost() {
    let mut rng = StdRng::seed_from_u64(2);
    let mut input = PREFACE.to_vec();
    let fields = request(GO_AUTHORITY, b"/pluginregistration.Registration/GetInfo");
    let block = ClientEncoder::new().encode(&as_refs(&fields), &mut rng);
    header_frames(&mut input, 1, &block, true, &mut rng);
    let (out, rewriter) = run(&input, 7).unwrap();
    let blocks = decode_header_blocks(&out[PREFACE.len()..]).unwrap();
    let mut expected = fields.clone();
    expected[3].1 = b"localhost".to_vec();
    assert_eq!(fields_of(&blocks), vec![expected]);
    assert_eq!(rewriter.stats().rewritten, 1);
    // END_STREAM survives re-encoding.
    assert_eq!(out[PREFACE.len() + 4] & flag::END_STREAM, flag::END_STREAM);
}

#[test]
fn indexed_reference_to_a_path_authority_is_replaced_too() {
    // A Go client inserts the path authority on the first request and refers
    // to it by dynamic index on the next ones.
    let mut rng = StdRng::seed_from_u64(3);
    let mut encoder = ClientEncoder::new();
    let mut input = PREFACE.to_vec();
    let mut expected = Vec::new();
    for (stream, method) in [
        (1u32, "GetInfo"),
        (3, "NotifyRegistrationStatus"),
        (5, "GetInfo"),
    ] {
        let path = format!("/pluginregistration.Registration/{method}");
        let fields = request(GO_AUTHORITY, path.as_bytes());
        let block = encoder.encode(&as_refs(&fields), &mut rng);
        header_frames(&mut input, stream, &block, false, &mut rng);
        let mut fixed = fields.clone();
        fixed[3].1 = b"localhost".to_vec();
        expected.push(fixed);
    }
    let (out, rewriter) = run(&input, 5).unwrap();
    assert_eq!(
        fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap()),
        expected
    );
    assert_eq!(
        rewriter.stats(),
        RewriteStats {
            blocks: 3,
            rewritten: 3
        }
    );
}

#[test]
fn blocks_after_a_rewrite_are_reencoded_even_when_valid() {
    // The first request passes through and fills the server's table; the
    // second needs a rewrite; the third is valid but must not be passed
    // through, because its indexes would no longer mean the same thing.
    let mut rng = StdRng::seed_from_u64(4);
    let mut encoder = ClientEncoder::new();
    let mut input = PREFACE.to_vec();
    let mut expected = Vec::new();
    for (stream, authority) in [
        (1u32, &b"localhost"[..]),
        (3, GO_AUTHORITY),
        (5, b"localhost"),
    ] {
        let fields = request(authority, b"/v1beta1.Registration/Register");
        let block = encoder.encode(&as_refs(&fields), &mut rng);
        header_frames(&mut input, stream, &block, false, &mut rng);
        let mut fixed = fields.clone();
        fixed[3].1 = b"localhost".to_vec();
        expected.push(fixed);
    }
    let (out, rewriter) = run(&input, 3).unwrap();
    assert!(rewriter.is_reencoding());
    assert_eq!(
        fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap()),
        expected
    );
}

#[test]
fn large_reencoded_block_is_split_into_continuation_frames() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut fields = request(GO_AUTHORITY, b"/x.Y/Z");
    fields.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
    let block = ClientEncoder::new().encode(&as_refs(&fields), &mut rng);
    let mut input = PREFACE.to_vec();
    header_frames(&mut input, 1, &block, false, &mut rng);
    let (out, _) = run(&input, 4096).unwrap();
    let frames = &out[PREFACE.len()..];
    let first_len =
        usize::from(frames[0]) << 16 | usize::from(frames[1]) << 8 | usize::from(frames[2]);
    assert!(first_len <= MAX_PAYLOAD);
    assert_eq!(
        frames[4] & flag::END_HEADERS,
        0,
        "first frame must not end the block"
    );
    let mut expected = fields.clone();
    expected[3].1 = b"localhost".to_vec();
    assert_eq!(
        fields_of(&decode_header_blocks(frames).unwrap()),
        vec![expected]
    );
}

#[test]
fn non_http2_input_passes_through_untouched() {
    let input = b"GET / HTTP/1.1\r\nHost: /tmp/x.sock\r\n\r\n".to_vec();
    let (out, _) = run(&input, 3).unwrap();
    assert_eq!(out, input);
}

#[test]
fn stray_continuation_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    frame(
        &mut input,
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &[0x82],
    );
    frame(&mut input, 0x0, 0, 1, b"data");
    let (out, _) = run(&input, 2).unwrap();
    assert_eq!(out, input);
}

#[test]
fn interrupted_header_block_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    frame(&mut input, kind::HEADERS, 0, 1, &[0x82]);
    frame(&mut input, 0x0, 0, 1, b"data");
    let (out, _) = run(&input, 1).unwrap();
    assert_eq!(out, input);
}

#[test]
fn bad_padding_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    frame(
        &mut input,
        kind::HEADERS,
        flag::PADDED | flag::END_HEADERS,
        1,
        &[9, 0x82],
    );
    let (out, _) = run(&input, 1).unwrap();
    assert_eq!(out, input);
}

#[test]
fn protocol_violation_after_reencoding_closes_the_connection() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut input = PREFACE.to_vec();
    let block = ClientEncoder::new().encode(&as_refs(&request(GO_AUTHORITY, b"/a.B/C")), &mut rng);
    header_frames(&mut input, 1, &block, false, &mut rng);
    frame(
        &mut input,
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &[0x82],
    );
    assert!(matches!(run(&input, 16), Err(RewriteError::Protocol(_))));
}

#[test]
fn undecodable_header_block_closes_the_connection() {
    let mut input = PREFACE.to_vec();
    frame(&mut input, kind::HEADERS, flag::END_HEADERS, 1, &[0x80]);
    assert!(matches!(
        run(&input, 64),
        Err(RewriteError::Hpack { stream_id: 1, .. })
    ));
}

#[test]
fn oversized_header_block_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    let mut header = Vec::new();
    frame(&mut header, kind::HEADERS, 0, 1, &[]);
    let len = MAX_HEADER_BLOCK;
    header[..3].copy_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
    input.extend_from_slice(&header);
    input.extend(std::iter::repeat_n(0u8, 100));
    let (out, _) = run(&input, 50).unwrap();
    assert_eq!(out, input);
}

#[test]
fn random_connections_decode_as_the_client_meant_with_authority_fixed() {
    let authorities: [&[u8]; 6] = [
        b"localhost",
        GO_AUTHORITY,
        b"/var/lib/kubelet/device-plugins/kubelet.sock",
        b"",
        b"example.com:8080",
        b"bad authority with spaces",
    ];
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut encoder = ClientEncoder::new();
        let mut input = PREFACE.to_vec();
        frame(&mut input, 0x4, 0, 0, &[0, 1, 0, 0, 0x10, 0]);
        let mut expected = Vec::new();
        let mut stream = 1u32;
        for _ in 0..rng.random_range(1..8) {
            let authority = authorities[rng.random_range(0..authorities.len())];
            let mut fields = request(
                authority,
                format!("/svc.S/M{}", rng.random_range(0..4)).as_bytes(),
            );
            for extra in 0..rng.random_range(0..4) {
                let value: Vec<u8> = (0..rng.random_range(0..300))
                    .map(|_| rng.random_range(0x20..0x7f))
                    .collect();
                fields.push((format!("x-extra-{extra}").into_bytes(), value));
            }
            let block = encoder.encode(&as_refs(&fields), &mut rng);
            header_frames(&mut input, stream, &block, rng.random_bool(0.2), &mut rng);
            if rng.random_bool(0.5) {
                frame(
                    &mut input,
                    0x0,
                    0,
                    stream,
                    &vec![7u8; rng.random_range(0..100)],
                );
            }
            if rng.random_bool(0.2) {
                frame(&mut input, 0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
            }
            for (name, value) in &mut fields {
                if name.as_slice() == b":authority" && !is_valid_authority(value) {
                    *value = b"localhost".to_vec();
                }
            }
            expected.push(fields);
            stream += 2;
        }
        let chunk = rng.random_range(1..200);
        let (out, _) = run(&input, chunk).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got = fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap());
        assert_eq!(got, expected, "seed {seed}");
    }
}

#[test]
fn valid_and_invalid_authorities_are_told_apart() {
    for valid in [
        &b"localhost"[..],
        b"example.com:443",
        b"127.0.0.1:8080",
        b"[::1]:80",
    ] {
        assert!(
            is_valid_authority(valid),
            "{}",
            String::from_utf8_lossy(valid)
        );
    }
    for invalid in [&b""[..], GO_AUTHORITY, b"/tmp/a.sock", b"a b", b"\xff"] {
        assert!(
            !is_valid_authority(invalid),
            "{}",
            String::from_utf8_lossy(invalid)
        );
    }
}

#[test]
fn empty_authority_is_replaced_even_as_the_first_one_seen() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut input = PREFACE.to_vec();
    let block = ClientEncoder::new().encode(&as_refs(&request(b"", b"/a.B/C")), &mut rng);
    header_frames(&mut input, 1, &block, false, &mut rng);
    let (out, rewriter) = run(&input, 64).unwrap();
    let blocks = fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap());
    assert_eq!(
        blocks[0][3],
        (b":authority".to_vec(), b"localhost".to_vec())
    );
    assert_eq!(rewriter.stats().rewritten, 1);
}

/// Random corruption of valid connections: the rewriter must never panic,
/// and what it produces must not depend on how the input was split into reads.
#[test]
fn corrupted_streams_never_panic_and_chunking_never_changes_the_output() {
    for seed in 0..400u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut encoder = ClientEncoder::new();
        let mut input = PREFACE.to_vec();
        for stream in 0..rng.random_range(1..5u32) {
            let authority = if rng.random_bool(0.5) {
                GO_AUTHORITY
            } else {
                b"localhost"
            };
            let block = encoder.encode(&as_refs(&request(authority, b"/s.S/M")), &mut rng);
            header_frames(&mut input, 1 + 2 * stream, &block, false, &mut rng);
            frame(&mut input, 0x0, 0x1, 1 + 2 * stream, &[0, 0, 0, 0, 0]);
        }
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(PREFACE.len()..input.len());
            input[at] ^= 1 << rng.random_range(0..8);
        }
        let whole = run(&input, input.len());
        let bytewise = run(&input, 1);
        let chunked = run(&input, rng.random_range(2..64));
        match (whole, bytewise, chunked) {
            (Ok((a, _)), Ok((b, _)), Ok((c, _))) => {
                assert_eq!(a, b, "seed {seed}");
                assert_eq!(a, c, "seed {seed}");
            }
            (Err(a), Err(b), Err(c)) => {
                assert_eq!(a.to_string(), b.to_string(), "seed {seed}");
                assert_eq!(a.to_string(), c.to_string(), "seed {seed}");
            }
            (a, b, c) => panic!(
                "seed {seed}: outcome depends on chunking: {:?} {:?} {:?}",
                a.is_ok(),
                b.is_ok(),
                c.is_ok()
            ),
        }
    }
}

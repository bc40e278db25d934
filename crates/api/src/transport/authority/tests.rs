//! The authority rewriter fed real-looking connections: a client-side HPACK
//! encoder and frame writers shared by the tests in `tests/`.

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::transport::hpack::HeaderField;

mod malformed;
mod randomized;
mod rewriting;

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

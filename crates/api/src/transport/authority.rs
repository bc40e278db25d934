//! Accepting a path-valued `:authority` from HTTP/2 clients.
//!
//! grpc-go clients that dial a Unix socket by its bare path (the kubelet's
//! plugin manager, most Go device plugins) send the path as `:authority`. h2,
//! under tonic, validates `:authority` strictly and resets such streams with
//! PROTOCOL_ERROR. [`AuthorityRewriter`] sits on the client-to-server byte
//! stream in front of h2 and replaces any `:authority` that is not a valid URI
//! authority with `localhost`; the server side is otherwise untouched.
//!
//! # How it stays correct
//!
//! The rewriter parses frames (preface, 9-byte headers, payloads). Frames
//! other than HEADERS and CONTINUATION are streamed through unbuffered. A
//! header block (HEADERS plus any CONTINUATION frames, with their padding and
//! priority fields) is collected whole and decoded with an HPACK decoder
//! whose dynamic table mirrors the client's encoder, so indexed references
//! and table size updates are always understood.
//!
//! - While no block has needed a change, every block is forwarded byte for
//!   byte: the server's table stays identical to the client's.
//! - From the first block that needs a change, the connection switches to
//!   re-encoding: every later block is written with static-table references
//!   and literals without indexing (size updates are passed on), so the
//!   server's dynamic table is never consulted or extended again and cannot
//!   fall out of step with what the client meant.
//!
//! Frame-level violations (CONTINUATION without HEADERS, interleaved frames,
//! bad padding, a client PUSH_PROMISE) are handed to h2 unchanged while
//! nothing has been re-encoded, so the client gets h2's own connection error;
//! after re-encoding began, and for any HPACK error, the connection is closed.

// Public for the fuzz targets and the benchmark (feature `fuzzing`) only.
#![cfg_attr(
    not(feature = "fuzzing"),
    allow(unreachable_pub, dead_code, unused_imports)
)]

use bytes::BytesMut;

use std::ops::Range;

use super::frame::{FrameHeader, HEADER_LEN, PREFACE, PRIORITY_LEN, flag, kind};
use super::hpack::{self, Decoder, Event, HpackError};

/// The most header-block bytes buffered for one request; far above what any
/// server accepts as a header list, so only an abusive client reaches it.
pub const MAX_HEADER_BLOCK: usize = 1024 * 1024;

/// The authority that replaces an invalid one, as the kubelet itself sends.
pub const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

/// Why a connection had to be closed.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// The client's header block could not be decoded.
    #[error("undecodable header block on stream {stream_id}: {source}")]
    Hpack {
        /// The stream whose HEADERS carried the block.
        stream_id: u32,
        /// What was wrong with it.
        #[source]
        source: HpackError,
    },
    /// A frame-level protocol violation after re-encoding began.
    #[error("HTTP/2 protocol violation after header re-encoding began: {0}")]
    Protocol(&'static str),
}

/// Where the parser is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Matching the connection preface; `matched` bytes so far.
    Preface { matched: usize },
    /// Collecting a 9-byte frame header.
    FrameHeader,
    /// Streaming the payload of a frame we do not inspect.
    Forward { remaining: usize },
    /// Buffering the payload of a HEADERS or CONTINUATION frame.
    Collect { remaining: usize },
    /// Not HTTP/2 with prior knowledge, or handed to h2 after a violation:
    /// everything passes through untouched.
    Transparent,
}

/// A header block being assembled from HEADERS and CONTINUATION frames.
#[derive(Debug, Default)]
struct PendingBlock {
    /// The frames exactly as received, for verbatim forwarding.
    raw: Vec<u8>,
    /// The header block fragments, concatenated.
    fragments: Vec<u8>,
    /// The payload of the frame being collected.
    frame_payload: Vec<u8>,
    frame_type: u8,
    frame_flags: u8,
    /// A HEADERS frame was seen and END_HEADERS not yet.
    open: bool,
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; PRIORITY_LEN]>,
}

/// The fields of the block being examined, copied into one reusable buffer
/// so that deciding whether to rewrite costs no allocation per request.
#[derive(Debug, Default)]
struct FieldArena {
    bytes: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>, bool)>,
    size_updates: Vec<usize>,
}

impl FieldArena {
    fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
        self.size_updates.clear();
    }

    fn push(&mut self, name: &[u8], value: &[u8], sensitive: bool) {
        let name_start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        let value_start = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.fields.push((
            name_start..value_start,
            value_start..self.bytes.len(),
            sensitive,
        ));
    }
}

/// Counters describing what the rewriter did on one connection.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RewriteStats {
    /// Header blocks decoded.
    pub blocks: u64,
    /// `:authority` values replaced.
    pub rewritten: u64,
}

/// Rewrites invalid `:authority` values in a client-to-server HTTP/2 byte stream.
#[derive(Debug)]
pub struct AuthorityRewriter {
    state: State,
    header: [u8; HEADER_LEN],
    header_len: usize,
    block: PendingBlock,
    decoder: Decoder,
    /// Set once a block was changed; from then on every block is re-encoded.
    reencode: bool,
    stats: RewriteStats,
    arena: FieldArena,
    scratch: Vec<u8>,
    /// The last authority found valid; clients repeat theirs on every request.
    last_valid_authority: Option<Vec<u8>>,
}

impl Default for AuthorityRewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl AuthorityRewriter {
    /// A rewriter at the start of a connection.
    pub fn new() -> Self {
        Self {
            state: State::Preface { matched: 0 },
            header: [0; HEADER_LEN],
            header_len: 0,
            block: PendingBlock::default(),
            decoder: Decoder::new(),
            reencode: false,
            stats: RewriteStats::default(),
            arena: FieldArena::default(),
            scratch: Vec::new(),
            last_valid_authority: None,
        }
    }

    /// What was done so far.
    pub fn stats(&self) -> RewriteStats {
        self.stats
    }

    /// Whether this connection's header blocks are being re-encoded.
    pub fn is_reencoding(&self) -> bool {
        self.reencode
    }

    /// Consumes bytes read from the client and appends what the server should
    /// read to `out`. Bytes of an incomplete header block are held back until
    /// the block is complete. An error means the connection must be closed.
    pub fn feed(&mut self, mut input: &[u8], out: &mut BytesMut) -> Result<(), RewriteError> {
        while !input.is_empty() {
            match self.state {
                State::Transparent => {
                    out.extend_from_slice(input);
                    return Ok(());
                }
                State::Preface { matched } => {
                    let n = (PREFACE.len() - matched).min(input.len());
                    if input[..n] != PREFACE[matched..matched + n] {
                        self.state = State::Transparent;
                        continue;
                    }
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if matched + n == PREFACE.len() {
                        State::FrameHeader
                    } else {
                        State::Preface {
                            matched: matched + n,
                        }
                    };
                }
                State::FrameHeader => {
                    let n = (HEADER_LEN - self.header_len).min(input.len());
                    self.header[self.header_len..self.header_len + n].copy_from_slice(&input[..n]);
                    self.header_len += n;
                    input = &input[n..];
                    if self.header_len == HEADER_LEN {
                        self.header_len = 0;
                        self.on_frame_header(out)?;
                    }
                }
                State::Forward { remaining } => {
                    let n = remaining.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if n == remaining {
                        State::FrameHeader
                    } else {
                        State::Forward {
                            remaining: remaining - n,
                        }
                    };
                }
                State::Collect { remaining } => {
                    let n = remaining.min(input.len());
                    self.block.raw.extend_from_slice(&input[..n]);
                    self.block.frame_payload.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if n == remaining {
                        self.on_header_frame_complete(out)?;
                    } else {
                        self.state = State::Collect {
                            remaining: remaining - n,
                        };
                    }
                }
            }
        }
        Ok(())
    }

    fn on_frame_header(&mut self, out: &mut BytesMut) -> Result<(), RewriteError> {
        let header = self.header;
        let FrameHeader {
            len,
            kind: frame_type,
            flags,
            stream_id,
        } = FrameHeader::parse(&header);

        if self.block.open {
            if frame_type != kind::CONTINUATION || stream_id != self.block.stream_id {
                return self.give_up(out, &header, "header block interrupted by another frame");
            }
        } else {
            match frame_type {
                kind::HEADERS if stream_id != 0 => {
                    self.block.open = true;
                    self.block.stream_id = stream_id;
                    self.block.end_stream = flags & flag::END_STREAM != 0;
                }
                kind::HEADERS => return self.give_up(out, &header, "HEADERS on stream 0"),
                kind::CONTINUATION => {
                    return self.give_up(out, &header, "CONTINUATION without HEADERS");
                }
                kind::PUSH_PROMISE => {
                    return self.give_up(out, &header, "PUSH_PROMISE from a client");
                }
                _ => {
                    out.extend_from_slice(&header);
                    self.state = if len == 0 {
                        State::FrameHeader
                    } else {
                        State::Forward { remaining: len }
                    };
                    return Ok(());
                }
            }
        }

        if self.block.raw.len() + HEADER_LEN + len > MAX_HEADER_BLOCK {
            return self.give_up(out, &header, "header block larger than the buffering limit");
        }
        self.block.raw.extend_from_slice(&header);
        self.block.frame_type = frame_type;
        self.block.frame_flags = flags;
        self.block.frame_payload.clear();
        if len == 0 {
            self.on_header_frame_complete(out)
        } else {
            self.state = State::Collect { remaining: len };
            Ok(())
        }
    }

    fn on_header_frame_complete(&mut self, out: &mut BytesMut) -> Result<(), RewriteError> {
        let flags = self.block.frame_flags;
        let payload = std::mem::take(&mut self.block.frame_payload);
        let mut fragment = payload.as_slice();
        if self.block.frame_type == kind::HEADERS {
            let mut pad = 0usize;
            if flags & flag::PADDED != 0 {
                let Some((&pad_len, rest)) = fragment.split_first() else {
                    return self.give_up(out, &[], "PADDED HEADERS without a pad length");
                };
                pad = usize::from(pad_len);
                fragment = rest;
            }
            if flags & flag::PRIORITY != 0 {
                if fragment.len() < PRIORITY_LEN {
                    return self.give_up(out, &[], "PRIORITY HEADERS too short");
                }
                let (priority, rest) = fragment.split_at(PRIORITY_LEN);
                let mut fields = [0u8; PRIORITY_LEN];
                fields.copy_from_slice(priority);
                self.block.priority = Some(fields);
                fragment = rest;
            }
            if pad > fragment.len() {
                return self.give_up(out, &[], "padding longer than the HEADERS payload");
            }
            fragment = &fragment[..fragment.len() - pad];
        }
        self.block.fragments.extend_from_slice(fragment);
        self.block.frame_payload = payload;
        self.state = State::FrameHeader;
        if flags & flag::END_HEADERS != 0 {
            self.finish_block(out)
        } else {
            Ok(())
        }
    }

    fn finish_block(&mut self, out: &mut BytesMut) -> Result<(), RewriteError> {
        let stream_id = self.block.stream_id;
        let arena = &mut self.arena;
        arena.clear();
        let mut invalid_authority = false;
        let last_valid = &mut self.last_valid_authority;
        self.decoder
            .decode_with(&self.block.fragments, |event| match event {
                Event::SizeUpdate(size) => arena.size_updates.push(size),
                Event::Field {
                    name,
                    value,
                    sensitive,
                } => {
                    if name == b":authority" && last_valid.as_deref() != Some(value) {
                        if is_valid_authority(value) {
                            *last_valid = Some(value.to_vec());
                        } else {
                            invalid_authority = true;
                        }
                    }
                    arena.push(name, value, sensitive);
                }
            })
            .map_err(|source| RewriteError::Hpack { stream_id, source })?;
        self.stats.blocks += 1;

        if invalid_authority || self.reencode {
            self.reencode = true;
            let mut encoded = std::mem::take(&mut self.scratch);
            encoded.clear();
            for &size in &self.arena.size_updates {
                hpack::encode_size_update(size, &mut encoded);
            }
            for (name, value, sensitive) in &self.arena.fields {
                let name = &self.arena.bytes[name.clone()];
                let mut value = &self.arena.bytes[value.clone()];
                if name == b":authority"
                    && self.last_valid_authority.as_deref() != Some(value)
                    && !is_valid_authority(value)
                {
                    value = REPLACEMENT_AUTHORITY;
                    self.stats.rewritten += 1;
                }
                hpack::encode_field(name, value, *sensitive, &mut encoded);
            }
            write_header_frames(
                out,
                stream_id,
                self.block.end_stream,
                self.block.priority,
                &encoded,
            );
            self.scratch = encoded;
        } else {
            out.extend_from_slice(&self.block.raw);
        }
        self.reset_block();
        Ok(())
    }

    /// Handles a frame-level violation: before any re-encoding, hand everything
    /// to h2 unchanged (it answers with its own connection error); after, close.
    fn give_up(
        &mut self,
        out: &mut BytesMut,
        pending_header: &[u8],
        why: &'static str,
    ) -> Result<(), RewriteError> {
        if self.reencode {
            return Err(RewriteError::Protocol(why));
        }
        out.extend_from_slice(&self.block.raw);
        out.extend_from_slice(pending_header);
        self.reset_block();
        self.state = State::Transparent;
        Ok(())
    }

    fn reset_block(&mut self) {
        let block = &mut self.block;
        block.raw.clear();
        block.fragments.clear();
        block.frame_payload.clear();
        block.open = false;
        block.stream_id = 0;
        block.end_stream = false;
        block.priority = None;
    }
}

/// Whether h2 would accept `value` as `:authority`.
pub fn is_valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

mod frames;

pub use frames::decode_header_blocks;
use frames::write_header_frames;

#[cfg(test)]
mod tests;

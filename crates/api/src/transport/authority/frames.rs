//! HTTP/2 HEADERS and CONTINUATION frames: written for a rewritten header
//! block, and read back (for tests and fuzzing) into header blocks.

use bytes::BytesMut;

use super::super::frame::{FrameHeader, HEADER_LEN, MAX_PAYLOAD, PRIORITY_LEN, flag, kind};
use super::super::hpack::{Decoder, HeaderField, HpackError};

/// Writes a header block as one HEADERS frame and as many CONTINUATION frames
/// as the 16 KiB frame size floor requires. Padding is dropped; END_STREAM and
/// the priority fields are kept.
pub(super) fn write_header_frames(
    out: &mut BytesMut,
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; PRIORITY_LEN]>,
    block: &[u8],
) {
    let mut rest = block;
    let mut first = true;
    loop {
        let priority_here = if first { priority } else { None };
        let room = MAX_PAYLOAD - priority_here.map_or(0, |_| PRIORITY_LEN);
        let (chunk, remainder) = rest.split_at(room.min(rest.len()));
        rest = remainder;
        let end_headers = rest.is_empty();
        let (frame_type, mut flags) = if first {
            let mut flags = 0;
            if end_stream {
                flags |= flag::END_STREAM;
            }
            if priority_here.is_some() {
                flags |= flag::PRIORITY;
            }
            (kind::HEADERS, flags)
        } else {
            (kind::CONTINUATION, 0)
        };
        if end_headers {
            flags |= flag::END_HEADERS;
        }
        let len = chunk.len() + priority_here.map_or(0, |_| PRIORITY_LEN);
        out.reserve(HEADER_LEN + len);
        FrameHeader {
            len,
            kind: frame_type,
            flags,
            stream_id,
        }
        .put(out);
        if let Some(priority) = priority_here {
            out.extend_from_slice(&priority);
        }
        out.extend_from_slice(chunk);
        first = false;
        if end_headers {
            return;
        }
    }
}

/// Decodes every header block in a sequence of frames (without the preface)
/// the way the server reading the rewriter's output does, with one decoder
/// for the whole sequence. For tests and fuzzing; frames are assumed well formed.
pub fn decode_header_blocks(frames: &[u8]) -> Result<Vec<Vec<HeaderField>>, HpackError> {
    let mut decoder = Decoder::new();
    let mut blocks = Vec::new();
    let mut fragments = Vec::new();
    let mut pos = 0;
    while let Some(header) = FrameHeader::peek(&frames[pos..]) {
        let (len, frame_type, flags) = (header.len, header.kind, header.flags);
        let end = (pos + HEADER_LEN + len).min(frames.len());
        let mut payload = &frames[pos + HEADER_LEN..end];
        pos = end;
        if frame_type != kind::HEADERS && frame_type != kind::CONTINUATION {
            continue;
        }
        if frame_type == kind::HEADERS {
            let mut pad = 0;
            if flags & flag::PADDED != 0 && !payload.is_empty() {
                pad = usize::from(payload[0]);
                payload = &payload[1..];
            }
            if flags & flag::PRIORITY != 0 && payload.len() >= PRIORITY_LEN {
                payload = &payload[PRIORITY_LEN..];
            }
            payload = &payload[..payload.len().saturating_sub(pad)];
        }
        fragments.extend_from_slice(payload);
        if flags & flag::END_HEADERS != 0 {
            blocks.push(decoder.decode(&fragments)?.fields);
            fragments.clear();
        }
    }
    Ok(blocks)
}

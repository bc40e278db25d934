//! HTTP/2 framing (RFC 9113 §3.4, §4.1, §6): the connection preface, the
//! frame types and flags, and the 9-byte frame header. The one frame layer
//! every hand-written HTTP/2 reader and writer here uses: the `:authority`
//! rewriter in front of our servers and the agent's light connection to a
//! DRA plugin.

use bytes::BufMut;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame header's length.
pub const HEADER_LEN: usize = 9;

/// The largest frame payload every peer must accept before it says
/// otherwise (SETTINGS_MAX_FRAME_SIZE's initial value and floor).
pub const MAX_PAYLOAD: usize = 16_384;

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// HEADERS (§6.2).
    pub const HEADERS: u8 = 0x1;
    /// SETTINGS (§6.5).
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (§6.6).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING (§6.7).
    pub const PING: u8 = 0x6;
    /// GOAWAY (§6.8).
    pub const GOAWAY: u8 = 0x7;
    /// CONTINUATION (§6.10).
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6); a flag's meaning depends on the frame type.
pub mod flag {
    /// SETTINGS and PING: this frame acknowledges the peer's.
    pub const ACK: u8 = 0x1;
    /// HEADERS and DATA: the last frame of the stream.
    pub const END_STREAM: u8 = 0x1;
    /// HEADERS and CONTINUATION: the header block ends here.
    pub const END_HEADERS: u8 = 0x4;
    /// HEADERS and DATA: a pad length and padding are present.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: the priority fields are present.
    pub const PRIORITY: u8 = 0x20;
}

/// The priority fields' length in a HEADERS frame with [`flag::PRIORITY`].
pub const PRIORITY_LEN: usize = 5;

/// A frame header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The payload's length (24 bits).
    pub len: usize,
    /// The frame type (see [`kind`]).
    pub kind: u8,
    /// The flags (see [`flag`]).
    pub flags: u8,
    /// The stream, without the reserved bit; 0 for the connection.
    pub stream_id: u32,
}

impl FrameHeader {
    /// A header for the connection (stream 0).
    pub const fn connection(kind: u8, flags: u8, len: usize) -> Self {
        Self {
            len,
            kind,
            flags,
            stream_id: 0,
        }
    }

    /// Reads a header.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Self {
        Self {
            len: usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]),
            kind: bytes[3],
            flags: bytes[4],
            stream_id: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }

    /// Reads the header at the start of `bytes`, if a whole one is there.
    pub fn peek(bytes: &[u8]) -> Option<Self> {
        bytes.first_chunk::<HEADER_LEN>().map(Self::parse)
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Writes the header. `len` must fit in 24 bits (every length here is
    /// at most [`MAX_PAYLOAD`]).
    pub fn put(&self, out: &mut impl BufMut) {
        out.put_uint(self.len as u64, 3);
        out.put_u8(self.kind);
        out.put_u8(self.flags);
        out.put_u32(self.stream_id);
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut bytes = [0; HEADER_LEN];
        self.put(&mut &mut bytes[..]);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written_without_the_reserved_bit() {
        let header = FrameHeader {
            len: 0x01_02_03,
            kind: kind::CONTINUATION,
            flags: flag::END_HEADERS,
            stream_id: 0x7fff_fffe,
        };
        let mut bytes = header.to_bytes();
        assert_eq!(bytes, [1, 2, 3, 9, 4, 0x7f, 0xff, 0xff, 0xfe]);
        assert_eq!(FrameHeader::parse(&bytes), header);
        bytes[5] |= 0x80;
        assert_eq!(
            FrameHeader::parse(&bytes),
            header,
            "the reserved bit is ignored"
        );
        assert_eq!(FrameHeader::peek(&bytes[..8]), None, "not a whole header");
        assert_eq!(FrameHeader::peek(&bytes), Some(header));
    }
}

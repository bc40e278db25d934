//! What the decoder produces: header fields, decoding events and whole
//! header blocks.

use bytes::Bytes;

/// One decoded header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderField {
    /// Field name, lower-case for valid HTTP/2 requests.
    pub name: Bytes,
    /// Field value.
    pub value: Bytes,
    /// Sent as "never indexed": intermediaries must keep it out of compression tables.
    pub sensitive: bool,
}

/// One step of a decoded header block, as
/// [`Decoder::decode_with`](super::Decoder::decode_with) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A dynamic table size update (only at the start of a block).
    SizeUpdate(usize),
    /// A header field.
    Field {
        /// Field name.
        name: &'a [u8],
        /// Field value.
        value: &'a [u8],
        /// Sent as "never indexed".
        sensitive: bool,
    },
}

/// A decoded header block.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeaderBlock {
    /// Dynamic table size updates found at the start of the block, in order.
    pub size_updates: Vec<usize>,
    /// The header fields, in order.
    pub fields: Vec<HeaderField>,
}

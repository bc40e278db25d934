//! A small HPACK (RFC 7541) implementation for the authority layer: a full
//! decoder that keeps a mirror of the client's dynamic table, and a stateless
//! encoder that never touches the server's dynamic table.

// Public for the fuzz targets and the benchmark (feature `fuzzing`) only.
#![cfg_attr(
    not(feature = "fuzzing"),
    allow(unreachable_pub, dead_code, unused_imports)
)]

mod decoder;
mod encoder;
mod huffman;
mod table;
#[cfg(test)]
mod tests;

pub use decoder::{DEFAULT_TABLE_SIZE, Decoder, MAX_TABLE_SIZE_LIMIT};
pub use encoder::{encode_field, encode_size_update};

#[cfg(test)]
pub(crate) use encoder::encode_int as encode_int_for_tests;
#[cfg(test)]
pub(crate) use huffman::encode as huffman_encode;

/// The static table's entries, for tests that build their own encoders.
#[cfg(test)]
pub(crate) fn static_entries() -> &'static [(&'static [u8], &'static [u8])] {
    &table::STATIC_TABLE
}

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

/// One step of a decoded header block, as [`Decoder::decode_with`] reports it.
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

/// Why a header block could not be decoded. Each is a connection error
/// (COMPRESSION_ERROR) in HTTP/2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block ended inside a representation.
    #[error("header block truncated")]
    Truncated,
    /// An integer used more continuation bytes than any legal value needs.
    #[error("integer too large")]
    IntegerOverflow,
    /// An index of 0 or past the end of both tables.
    #[error("invalid table index {0}")]
    InvalidIndex(usize),
    /// A Huffman literal with a bad code, EOS, or bad padding.
    #[error("invalid Huffman-coded string")]
    InvalidHuffman,
    /// A dynamic table size update after a header field.
    #[error("dynamic table size update after a header field")]
    MisplacedSizeUpdate,
    /// A dynamic table size update above the limit this decoder accepts.
    #[error("dynamic table size update to {requested} exceeds the limit of {limit}")]
    TableSizeTooLarge {
        /// The size the peer asked for.
        requested: usize,
        /// The most this decoder allows.
        limit: usize,
    },
}

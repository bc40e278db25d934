//! Why an HPACK header block could not be decoded.

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

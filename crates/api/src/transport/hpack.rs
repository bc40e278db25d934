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
mod error;
mod fields;
mod huffman;
mod table;
#[cfg(test)]
mod tests;

pub use decoder::{DEFAULT_TABLE_SIZE, Decoder, MAX_TABLE_SIZE_LIMIT};
pub use encoder::{encode_field, encode_size_update};
pub use error::HpackError;
pub use fields::{Event, HeaderBlock, HeaderField};

#[cfg(test)]
pub(crate) use encoder::encode_int as encode_int_for_tests;
#[cfg(test)]
pub(crate) use huffman::encode as huffman_encode;

/// The static table's entries, for tests that build their own encoders.
#[cfg(test)]
pub(crate) fn static_entries() -> &'static [(&'static [u8], &'static [u8])] {
    &table::STATIC_TABLE
}

//! Stateless HPACK encoding (RFC 7541 §6).
//!
//! Fields are written as static-table references or literals *without
//! indexing*, so the receiver's dynamic table never changes. That is what lets
//! the authority layer re-encode a client's header blocks without tracking
//! (or disturbing) the server's table.

use super::table::{static_exact, static_name};

/// Appends one header field; `sensitive` writes it as "never indexed".
pub fn encode_field(name: &[u8], value: &[u8], sensitive: bool, out: &mut Vec<u8>) {
    if !sensitive && let Some(index) = static_exact(name, value) {
        encode_int(index, 7, 0x80, out);
        return;
    }
    // 0000 = without indexing, 0001 = never indexed; both with a 4-bit name index.
    let flags = if sensitive { 0x10 } else { 0x00 };
    match static_name(name) {
        Some(index) => encode_int(index, 4, flags, out),
        None => {
            out.push(flags);
            encode_string(name, out);
        }
    }
    encode_string(value, out);
}

/// Appends a dynamic table size update.
pub fn encode_size_update(size: usize, out: &mut Vec<u8>) {
    encode_int(size, 5, 0x20, out);
}

fn encode_string(value: &[u8], out: &mut Vec<u8>) {
    encode_int(value.len(), 7, 0x00, out);
    out.extend_from_slice(value);
}

/// Appends an integer with an N-bit prefix (RFC 7541 §5.1); `flags` fills the bits above it.
pub(crate) fn encode_int(value: usize, prefix_bits: u8, flags: u8, out: &mut Vec<u8>) {
    let mask = (1usize << prefix_bits) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

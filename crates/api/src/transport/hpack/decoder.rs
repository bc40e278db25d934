//! HPACK header block decoding (RFC 7541 §6).

use bytes::Bytes;

use super::error::HpackError;
use super::fields::{Event, HeaderBlock, HeaderField};
use super::huffman;
use super::table::DynamicTable;

/// The dynamic table size every HTTP/2 connection starts with (RFC 7540 §6.5.2).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// The largest dynamic table size update accepted. HTTP/2 servers we front
/// advertise the default 4096; the server itself rejects anything above its
/// own setting, so this only bounds the memory of our mirror table.
pub const MAX_TABLE_SIZE_LIMIT: usize = 64 * 1024;

/// Decodes header blocks, keeping a dynamic table in step with the peer's encoder.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    size_limit: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder in the state of a fresh HTTP/2 connection.
    pub fn new() -> Self {
        Self {
            table: DynamicTable::new(DEFAULT_TABLE_SIZE),
            size_limit: MAX_TABLE_SIZE_LIMIT,
        }
    }

    /// Decodes one complete header block (all fragments concatenated).
    ///
    /// On error the table may be partly updated; the connection is unusable
    /// anyway, since HTTP/2 treats any decoding error as fatal.
    pub fn decode(&mut self, block: &[u8]) -> Result<HeaderBlock, HpackError> {
        let mut out = HeaderBlock::default();
        self.decode_with(block, |event| match event {
            Event::SizeUpdate(size) => out.size_updates.push(size),
            Event::Field {
                name,
                value,
                sensitive,
            } => out.fields.push(HeaderField {
                name: Bytes::copy_from_slice(name),
                value: Bytes::copy_from_slice(value),
                sensitive,
            }),
        })?;
        Ok(out)
    }

    /// Decodes one complete header block, handing each size update and field
    /// to `on_event` in order without collecting them.
    pub fn decode_with(
        &mut self,
        block: &[u8],
        mut on_event: impl FnMut(Event<'_>),
    ) -> Result<(), HpackError> {
        let mut pos = 0;
        let mut seen_field = false;
        while pos < block.len() {
            let first = block[pos];
            if first & 0x80 != 0 {
                // Indexed header field (§6.1).
                let index = decode_int(block, &mut pos, 7)?;
                let (name, value) = self
                    .table
                    .get(index)
                    .ok_or(HpackError::InvalidIndex(index))?;
                on_event(Event::Field {
                    name,
                    value,
                    sensitive: false,
                });
                seen_field = true;
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing (§6.2.1).
                let (name, value) = self.literal(block, &mut pos, 6)?;
                on_event(Event::Field {
                    name: &name,
                    value: &value,
                    sensitive: false,
                });
                self.table.insert(name, value);
                seen_field = true;
            } else if first & 0x20 != 0 {
                // Dynamic table size update (§6.3): only before the first field.
                if seen_field {
                    return Err(HpackError::MisplacedSizeUpdate);
                }
                let size = decode_int(block, &mut pos, 5)?;
                if size > self.size_limit {
                    return Err(HpackError::TableSizeTooLarge {
                        requested: size,
                        limit: self.size_limit,
                    });
                }
                self.table.set_max_size(size);
                on_event(Event::SizeUpdate(size));
            } else {
                // Literal without indexing (0000) or never indexed (0001) (§6.2.2, §6.2.3).
                let sensitive = first & 0x10 != 0;
                let (name, value) = self.literal(block, &mut pos, 4)?;
                on_event(Event::Field {
                    name: &name,
                    value: &value,
                    sensitive,
                });
                seen_field = true;
            }
        }
        Ok(())
    }

    fn literal(
        &self,
        block: &[u8],
        pos: &mut usize,
        prefix_bits: u8,
    ) -> Result<(Bytes, Bytes), HpackError> {
        let index = decode_int(block, pos, prefix_bits)?;
        let name = if index == 0 {
            decode_string(block, pos)?
        } else {
            self.table
                .name(index)
                .ok_or(HpackError::InvalidIndex(index))?
        };
        let value = decode_string(block, pos)?;
        Ok((name, value))
    }

    #[cfg(test)]
    pub(crate) fn table_len(&self) -> usize {
        self.table.len()
    }
}

/// Decodes an integer with an N-bit prefix (RFC 7541 §5.1).
pub(crate) fn decode_int(
    block: &[u8],
    pos: &mut usize,
    prefix_bits: u8,
) -> Result<usize, HpackError> {
    let mask = (1u8 << prefix_bits) - 1;
    let first = block.get(*pos).ok_or(HpackError::Truncated)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = usize::from(mask);
    let mut shift = 0u32;
    loop {
        let byte = *block.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        // Four continuation bytes carry 28 bits; no header length or index needs more.
        if shift > 21 {
            return Err(HpackError::IntegerOverflow);
        }
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Decodes a string literal, Huffman-coded or raw (RFC 7541 §5.2).
fn decode_string(block: &[u8], pos: &mut usize) -> Result<Bytes, HpackError> {
    let huffman_coded = block.get(*pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = decode_int(block, pos, 7)?;
    let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = block.get(*pos..end).ok_or(HpackError::Truncated)?;
    *pos = end;
    if huffman_coded {
        let mut decoded = Vec::with_capacity(len + len / 2);
        huffman::decode(raw, &mut decoded)?;
        Ok(Bytes::from(decoded))
    } else {
        Ok(Bytes::copy_from_slice(raw))
    }
}

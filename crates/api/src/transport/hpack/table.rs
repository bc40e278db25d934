//! The HPACK header tables (RFC 7541 §2.3): the fixed static table and the
//! per-connection dynamic table.

use std::collections::VecDeque;

use bytes::Bytes;

/// The static table, RFC 7541 Appendix A; index 1 is the first entry.
pub(crate) const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Per-entry overhead counted in the table size (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Finds the static index whose name and value both match.
pub(crate) fn static_exact(name: &[u8], value: &[u8]) -> Option<usize> {
    STATIC_TABLE
        .iter()
        .position(|&(n, v)| n == name && v == value)
        .map(|i| i + 1)
}

/// Finds the first static index whose name matches.
pub(crate) fn static_name(name: &[u8]) -> Option<usize> {
    STATIC_TABLE
        .iter()
        .position(|&(n, _)| n == name)
        .map(|i| i + 1)
}

/// The dynamic table a decoder keeps in step with its peer's encoder.
#[derive(Debug)]
pub(crate) struct DynamicTable {
    /// Newest entry first, so index 62 is `entries[0]`.
    entries: VecDeque<(Bytes, Bytes)>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub(crate) fn new(max_size: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    /// Looks up a combined index: 1..=61 is static, 62 and up dynamic.
    pub(crate) fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        match index {
            0 => None,
            1..=61 => Some(STATIC_TABLE[index - 1]),
            _ => self
                .entries
                .get(index - 62)
                .map(|(n, v)| (n.as_ref(), v.as_ref())),
        }
    }

    /// The name at a combined index, shared rather than copied.
    pub(crate) fn name(&self, index: usize) -> Option<Bytes> {
        match index {
            0 => None,
            1..=61 => Some(Bytes::from_static(STATIC_TABLE[index - 1].0)),
            _ => self.entries.get(index - 62).map(|(n, _)| n.clone()),
        }
    }

    /// Adds an entry, evicting the oldest ones to make room. An entry larger
    /// than the whole table empties it and is not added (RFC 7541 §4.4).
    pub(crate) fn insert(&mut self, name: Bytes, value: Bytes) {
        let entry_size = name.len() + value.len() + ENTRY_OVERHEAD;
        if entry_size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.size += entry_size;
        self.entries.push_front((name, value));
        self.evict();
    }

    /// Applies a dynamic table size update.
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max_size {
            match self.entries.pop_back() {
                Some((name, value)) => self.size -= name.len() + value.len() + ENTRY_OVERHEAD,
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

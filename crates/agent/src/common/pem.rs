//! PEM as Go's `encoding/pem` reads and writes it: blocks read one after
//! another (a block that does not decode ends the text), written with 64
//! characters a line.

use base64::Engine;

/// The contents (DER) of each PEM block of `text`, as Go's `pem.Decode`
/// reads them one after another (a block that does not decode ends it).
pub(crate) fn pem_blocks(text: &str) -> Vec<Vec<u8>> {
    let text = text.replace("\r\n", "\n");
    let mut blocks = Vec::new();
    let mut rest = text.as_str();
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin..];
        let Some(header_end) = after.find("-----\n").map(|i| i + "-----\n".len()) else {
            break;
        };
        let Some(end) = after.find("-----END ") else {
            break;
        };
        if end < header_end {
            break;
        }
        let body: String = after[header_end..end]
            .lines()
            .filter(|l| !l.contains(':'))
            .collect::<Vec<_>>()
            .concat();
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(body.trim()) else {
            break;
        };
        blocks.push(der);
        let tail = &after[end..];
        rest = match tail.find("-----\n").or_else(|| tail.rfind("-----")) {
            Some(i) => &tail[(i + 5).min(tail.len())..],
            None => "",
        };
    }
    blocks
}

/// `der` as one PEM block labelled `label`, 64 characters a line (Go's
/// `pem.EncodeToMemory`).
pub(crate) fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn pem_blocks_are_read_and_written_as_go_reads_and_writes_them() {
        let der: Vec<u8> = (0u8..=100).collect();
        let pem = String::from_utf8(pem("CERTIFICATE", &der)).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(pem.lines().all(|l| l.len() <= 64));
        let two = format!("{pem}junk between\n{pem}");
        assert_eq!(pem_blocks(&two), vec![der.clone(), der.clone()]);
        assert_eq!(pem_blocks(&pem.replace('\n', "\r\n")), vec![der]);
        assert!(pem_blocks("no block at all").is_empty());
    }
}

//! Arbitrary client bytes after a valid preface, fed in arbitrary read sizes:
//! the rewriter must not panic, its output must not depend on the read sizes,
//! and once it re-encodes, every `:authority` the server sees must be valid.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use nodeplugins_api::transport::authority::{AuthorityRewriter, decode_header_blocks, is_valid_authority};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn run(input: &[u8], chunk: usize) -> (Result<(), String>, Vec<u8>, bool) {
    let mut rewriter = AuthorityRewriter::new();
    let mut out = BytesMut::new();
    let mut result = rewriter.feed(PREFACE, &mut out).map_err(|e| e.to_string());
    for piece in input.chunks(chunk) {
        if result.is_err() {
            break;
        }
        result = rewriter.feed(piece, &mut out).map_err(|e| e.to_string());
    }
    (result, out.to_vec(), rewriter.is_reencoding())
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else { return };
    let chunk = usize::from(split).max(1);
    let (whole_result, whole, reencoding) = run(input, input.len().max(1));
    let (chunked_result, chunked, _) = run(input, chunk);
    assert_eq!(whole_result.is_ok(), chunked_result.is_ok());
    if whole_result.is_ok() {
        assert_eq!(whole, chunked);
        if reencoding {
            if let Ok(blocks) = decode_header_blocks(&whole[PREFACE.len()..]) {
                for field in blocks.iter().flatten() {
                    if field.name.as_ref() == b":authority" {
                        assert!(is_valid_authority(&field.value));
                    }
                }
            }
        }
    }
});

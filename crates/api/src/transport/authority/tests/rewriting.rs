//! Rewriting: valid authorities pass through, path-valued or empty ones
//! become `localhost` (also by index), later blocks are re-encoded, large
//! blocks are split; valid and invalid authorities told apart.

use super::*;
use crate::transport::frame::MAX_PAYLOAD;

#[test]
fn valid_authority_passes_through_byte_for_byte() {
    let mut rng = StdRng::seed_from_u64(1);
    let mut input = PREFACE.to_vec();
    frame(&mut input, 0x4, 0, 0, &[]);
    let fields = request(b"localhost", b"/pluginregistration.Registration/GetInfo");
    let block = ClientEncoder::new().encode(&as_refs(&fields), &mut rng);
    header_frames(&mut input, 1, &block, false, &mut rng);
    frame(&mut input, 0x0, 0x1, 1, &[0, 0, 0, 0, 0]);
    let (out, rewriter) = run(&input, input.len()).unwrap();
    assert_eq!(out, input);
    assert_eq!(
        rewriter.stats(),
        RewriteStats {
            blocks: 1,
            rewritten: 0
        }
    );
    assert!(!rewriter.is_reencoding());
}

#[test]
fn path_authority_is_replaced_with_localhost() {
    let mut rng = StdRng::seed_from_u64(2);
    let mut input = PREFACE.to_vec();
    let fields = request(GO_AUTHORITY, b"/pluginregistration.Registration/GetInfo");
    let block = ClientEncoder::new().encode(&as_refs(&fields), &mut rng);
    header_frames(&mut input, 1, &block, true, &mut rng);
    let (out, rewriter) = run(&input, 7).unwrap();
    let blocks = decode_header_blocks(&out[PREFACE.len()..]).unwrap();
    let mut expected = fields.clone();
    expected[3].1 = b"localhost".to_vec();
    assert_eq!(fields_of(&blocks), vec![expected]);
    assert_eq!(rewriter.stats().rewritten, 1);
    // END_STREAM survives re-encoding.
    assert_eq!(out[PREFACE.len() + 4] & flag::END_STREAM, flag::END_STREAM);
}

#[test]
fn indexed_reference_to_a_path_authority_is_replaced_too() {
    // A Go client inserts the path authority on the first request and refers
    // to it by dynamic index on the next ones.
    let mut rng = StdRng::seed_from_u64(3);
    let mut encoder = ClientEncoder::new();
    let mut input = PREFACE.to_vec();
    let mut expected = Vec::new();
    for (stream, method) in [
        (1u32, "GetInfo"),
        (3, "NotifyRegistrationStatus"),
        (5, "GetInfo"),
    ] {
        let path = format!("/pluginregistration.Registration/{method}");
        let fields = request(GO_AUTHORITY, path.as_bytes());
        let block = encoder.encode(&as_refs(&fields), &mut rng);
        header_frames(&mut input, stream, &block, false, &mut rng);
        let mut fixed = fields.clone();
        fixed[3].1 = b"localhost".to_vec();
        expected.push(fixed);
    }
    let (out, rewriter) = run(&input, 5).unwrap();
    assert_eq!(
        fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap()),
        expected
    );
    assert_eq!(
        rewriter.stats(),
        RewriteStats {
            blocks: 3,
            rewritten: 3
        }
    );
}

#[test]
fn blocks_after_a_rewrite_are_reencoded_even_when_valid() {
    // The first request passes through and fills the server's table; the
    // second needs a rewrite; the third is valid but must not be passed
    // through, because its indexes would no longer mean the same thing.
    let mut rng = StdRng::seed_from_u64(4);
    let mut encoder = ClientEncoder::new();
    let mut input = PREFACE.to_vec();
    let mut expected = Vec::new();
    for (stream, authority) in [
        (1u32, &b"localhost"[..]),
        (3, GO_AUTHORITY),
        (5, b"localhost"),
    ] {
        let fields = request(authority, b"/v1beta1.Registration/Register");
        let block = encoder.encode(&as_refs(&fields), &mut rng);
        header_frames(&mut input, stream, &block, false, &mut rng);
        let mut fixed = fields.clone();
        fixed[3].1 = b"localhost".to_vec();
        expected.push(fixed);
    }
    let (out, rewriter) = run(&input, 3).unwrap();
    assert!(rewriter.is_reencoding());
    assert_eq!(
        fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap()),
        expected
    );
}

#[test]
fn large_reencoded_block_is_split_into_continuation_frames() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut fields = request(GO_AUTHORITY, b"/x.Y/Z");
    fields.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
    let block = ClientEncoder::new().encode(&as_refs(&fields), &mut rng);
    let mut input = PREFACE.to_vec();
    header_frames(&mut input, 1, &block, false, &mut rng);
    let (out, _) = run(&input, 4096).unwrap();
    let frames = &out[PREFACE.len()..];
    let first_len =
        usize::from(frames[0]) << 16 | usize::from(frames[1]) << 8 | usize::from(frames[2]);
    assert!(first_len <= MAX_PAYLOAD);
    assert_eq!(
        frames[4] & flag::END_HEADERS,
        0,
        "first frame must not end the block"
    );
    let mut expected = fields.clone();
    expected[3].1 = b"localhost".to_vec();
    assert_eq!(
        fields_of(&decode_header_blocks(frames).unwrap()),
        vec![expected]
    );
}

#[test]
fn valid_and_invalid_authorities_are_told_apart() {
    for valid in [
        &b"localhost"[..],
        b"example.com:443",
        b"127.0.0.1:8080",
        b"[::1]:80",
    ] {
        assert!(
            is_valid_authority(valid),
            "{}",
            String::from_utf8_lossy(valid)
        );
    }
    for invalid in [&b""[..], GO_AUTHORITY, b"/tmp/a.sock", b"a b", b"\xff"] {
        assert!(
            !is_valid_authority(invalid),
            "{}",
            String::from_utf8_lossy(invalid)
        );
    }
}

#[test]
fn empty_authority_is_replaced_even_as_the_first_one_seen() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut input = PREFACE.to_vec();
    let block = ClientEncoder::new().encode(&as_refs(&request(b"", b"/a.B/C")), &mut rng);
    header_frames(&mut input, 1, &block, false, &mut rng);
    let (out, rewriter) = run(&input, 64).unwrap();
    let blocks = fields_of(&decode_header_blocks(&out[PREFACE.len()..]).unwrap());
    assert_eq!(
        blocks[0][3],
        (b":authority".to_vec(), b"localhost".to_vec())
    );
    assert_eq!(rewriter.stats().rewritten, 1);
}

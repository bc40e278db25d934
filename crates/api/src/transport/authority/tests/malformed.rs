//! Malformed input: handed to the server unchanged where it can be, the
//! connection closed where it cannot.

use super::*;

#[test]
fn non_http2_input_passes_through_untouched() {
    let input = b"GET / HTTP/1.1\r\nHost: /tmp/x.sock\r\n\r\n".to_vec();
    let (out, _) = run(&input, 3).unwrap();
    assert_eq!(out, input);
}

#[test]
fn stray_continuation_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    frame(
        &mut input,
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &[0x82],
    );
    frame(&mut input, 0x0, 0, 1, b"data");
    let (out, _) = run(&input, 2).unwrap();
    assert_eq!(out, input);
}

#[test]
fn interrupted_header_block_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    frame(&mut input, kind::HEADERS, 0, 1, &[0x82]);
    frame(&mut input, 0x0, 0, 1, b"data");
    let (out, _) = run(&input, 1).unwrap();
    assert_eq!(out, input);
}

#[test]
fn bad_padding_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    frame(
        &mut input,
        kind::HEADERS,
        flag::PADDED | flag::END_HEADERS,
        1,
        &[9, 0x82],
    );
    let (out, _) = run(&input, 1).unwrap();
    assert_eq!(out, input);
}

#[test]
fn protocol_violation_after_reencoding_closes_the_connection() {
    let mut rng = StdRng::seed_from_u64(6);
    let mut input = PREFACE.to_vec();
    let block = ClientEncoder::new().encode(&as_refs(&request(GO_AUTHORITY, b"/a.B/C")), &mut rng);
    header_frames(&mut input, 1, &block, false, &mut rng);
    frame(
        &mut input,
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &[0x82],
    );
    assert!(matches!(run(&input, 16), Err(RewriteError::Protocol(_))));
}

#[test]
fn undecodable_header_block_closes_the_connection() {
    let mut input = PREFACE.to_vec();
    frame(&mut input, kind::HEADERS, flag::END_HEADERS, 1, &[0x80]);
    assert!(matches!(
        run(&input, 64),
        Err(RewriteError::Hpack { stream_id: 1, .. })
    ));
}

#[test]
fn oversized_header_block_is_handed_to_the_server_unchanged() {
    let mut input = PREFACE.to_vec();
    let mut header = Vec::new();
    frame(&mut header, kind::HEADERS, 0, 1, &[]);
    let len = MAX_HEADER_BLOCK;
    header[..3].copy_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
    input.extend_from_slice(&header);
    input.extend(std::iter::repeat_n(0u8, 100));
    let (out, _) = run(&input, 50).unwrap();
    assert_eq!(out, input);
}

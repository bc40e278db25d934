use super::decoder::decode_int;
use super::encoder::encode_int;
use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn pairs(block: &HeaderBlock) -> Vec<(String, String)> {
    block
        .fields
        .iter()
        .map(|f| {
            (
                String::from_utf8(f.name.to_vec()).unwrap(),
                String::from_utf8(f.value.to_vec()).unwrap(),
            )
        })
        .collect()
}

fn owned(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn decodes_rfc7541_c3_requests_without_huffman() {
    let mut decoder = Decoder::new();
    let first = decoder
        .decode(&hex("828684410f7777772e6578616d706c652e636f6d"))
        .unwrap();
    assert_eq!(
        pairs(&first),
        owned(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com")
        ])
    );
    let second = decoder
        .decode(&hex("828684be58086e6f2d6361636865"))
        .unwrap();
    assert_eq!(
        pairs(&second),
        owned(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
            ("cache-control", "no-cache"),
        ])
    );
    let third = decoder
        .decode(&hex(
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ))
        .unwrap();
    assert_eq!(
        pairs(&third),
        owned(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ])
    );
    assert_eq!(decoder.table_len(), 3);
}

#[test]
fn decodes_rfc7541_c4_requests_with_huffman() {
    let mut decoder = Decoder::new();
    let first = decoder
        .decode(&hex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
        .unwrap();
    assert_eq!(first.fields[3].value.as_ref(), b"www.example.com");
    let second = decoder.decode(&hex("828684be5886a8eb10649cbf")).unwrap();
    assert_eq!(second.fields[4].value.as_ref(), b"no-cache");
    let third = decoder
        .decode(&hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))
        .unwrap();
    assert_eq!(
        pairs(&third)[4],
        ("custom-key".to_string(), "custom-value".to_string())
    );
}

#[test]
fn huffman_round_trips_every_byte_value() {
    let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let encoded = huffman::encode(&all);
    let mut decoded = Vec::new();
    huffman::decode(&encoded, &mut decoded).unwrap();
    assert_eq!(decoded, all);
}

#[test]
fn huffman_rejects_padding_longer_than_seven_bits() {
    // "0" is 00000 (5 bits); a full 0xff byte after it is 11 bits of padding.
    let mut out = Vec::new();
    assert_eq!(
        huffman::decode(&[0x07, 0xff], &mut out),
        Err(HpackError::InvalidHuffman)
    );
}

#[test]
fn huffman_rejects_padding_that_is_not_all_ones() {
    // "0" (00000) followed by 000 instead of 111.
    let mut out = Vec::new();
    assert_eq!(
        huffman::decode(&[0x00], &mut out),
        Err(HpackError::InvalidHuffman)
    );
}

#[test]
fn huffman_rejects_an_encoded_eos() {
    let mut out = Vec::new();
    assert_eq!(
        huffman::decode(&[0xff, 0xff, 0xff, 0xff], &mut out),
        Err(HpackError::InvalidHuffman)
    );
}

#[test]
fn integers_round_trip_across_prefix_sizes() {
    for prefix in 4..=7u8 {
        for value in [
            0usize,
            1,
            14,
            15,
            16,
            30,
            31,
            127,
            128,
            1337,
            65_535,
            (1 << 28) - 1,
        ] {
            let mut buf = Vec::new();
            encode_int(value, prefix, 0, &mut buf);
            let mut pos = 0;
            assert_eq!(
                decode_int(&buf, &mut pos, prefix).unwrap(),
                value,
                "prefix {prefix}"
            );
            assert_eq!(pos, buf.len());
        }
    }
}

#[test]
fn oversized_integers_are_rejected() {
    let mut pos = 0;
    let block = [0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert_eq!(
        decode_int(&block, &mut pos, 7),
        Err(HpackError::IntegerOverflow)
    );
}

#[test]
fn index_zero_and_past_the_table_are_errors() {
    assert_eq!(
        Decoder::new().decode(&[0x80]),
        Err(HpackError::InvalidIndex(0))
    );
    assert_eq!(
        Decoder::new().decode(&[0xbe]),
        Err(HpackError::InvalidIndex(62))
    );
}

#[test]
fn size_update_after_a_field_is_an_error() {
    assert_eq!(
        Decoder::new().decode(&[0x82, 0x20]),
        Err(HpackError::MisplacedSizeUpdate)
    );
}

#[test]
fn size_update_above_the_limit_is_an_error() {
    let mut block = Vec::new();
    encode_int(MAX_TABLE_SIZE_LIMIT + 1, 5, 0x20, &mut block);
    assert!(matches!(
        Decoder::new().decode(&block),
        Err(HpackError::TableSizeTooLarge { .. })
    ));
}

#[test]
fn size_update_to_zero_evicts_everything() {
    let mut decoder = Decoder::new();
    decoder
        .decode(&hex("828684410f7777772e6578616d706c652e636f6d"))
        .unwrap();
    assert_eq!(decoder.table_len(), 1);
    let block = decoder.decode(&[0x20, 0x82]).unwrap();
    assert_eq!(block.size_updates, vec![0]);
    assert_eq!(decoder.table_len(), 0);
    assert_eq!(decoder.decode(&[0xbe]), Err(HpackError::InvalidIndex(62)));
}

#[test]
fn truncated_blocks_are_errors() {
    for block in [
        &[0x41][..],
        &[0x41, 0x05, b'a'],
        &[0x00, 0x01, b'a'],
        &[0xff],
    ] {
        assert_eq!(
            Decoder::new().decode(block),
            Err(HpackError::Truncated),
            "{block:?}"
        );
    }
}

#[test]
fn encoder_output_decodes_to_the_same_fields_and_leaves_the_table_alone() {
    let fields = [
        (":method", "POST", false),
        (":authority", "localhost", false),
        (":path", "/pluginregistration.Registration/GetInfo", false),
        ("te", "trailers", false),
        ("authorization", "secret", true),
        ("x-custom", "value", false),
    ];
    let mut block = Vec::new();
    encode_size_update(1024, &mut block);
    for (name, value, sensitive) in fields {
        encode_field(name.as_bytes(), value.as_bytes(), sensitive, &mut block);
    }
    let mut decoder = Decoder::new();
    let decoded = decoder.decode(&block).unwrap();
    assert_eq!(decoded.size_updates, vec![1024]);
    assert_eq!(decoded.fields.len(), fields.len());
    for (field, (name, value, sensitive)) in decoded.fields.iter().zip(fields) {
        assert_eq!(field.name.as_ref(), name.as_bytes());
        assert_eq!(field.value.as_ref(), value.as_bytes());
        assert_eq!(field.sensitive, sensitive);
    }
    assert_eq!(decoder.table_len(), 0);
}

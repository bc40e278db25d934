//! Arbitrary header blocks: decoding never panics, and whatever decodes
//! re-encodes (statelessly) to a block that decodes to the same fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeplugins_api::transport::hpack::{Decoder, encode_field};

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new();
    for block in data.split(|&b| b == 0xff) {
        let Ok(decoded) = decoder.decode(block) else { return };
        let mut encoded = Vec::new();
        for field in &decoded.fields {
            encode_field(&field.name, &field.value, field.sensitive, &mut encoded);
        }
        let again = Decoder::new().decode(&encoded).expect("our own encoding decodes");
        assert_eq!(again.fields, decoded.fields);
    }
});

//! Arbitrary checkpoint files: decoding never panics, a damaged file is an
//! error (never a partial checkpoint), and whatever decodes encodes to a file
//! that decodes to the same checkpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeplugins::device::checkpoint::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(checkpoint) = decode(data) else { return };
    let bytes = encode(&checkpoint).expect("a decoded checkpoint encodes");
    assert_eq!(decode(&bytes).expect("our own encoding decodes"), checkpoint);
});

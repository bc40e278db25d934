//! Arbitrary checkpoint files: decoding never panics, a damaged file is an
//! error (never a partial checkpoint), and whatever decodes encodes to a file
//! that decodes to the same checkpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeplugins::fuzzing::{decode_device_checkpoint, encode_device_checkpoint};

fuzz_target!(|data: &[u8]| {
    let Ok(checkpoint) = decode_device_checkpoint(data) else {
        return;
    };
    let bytes = encode_device_checkpoint(&checkpoint).expect("a decoded checkpoint encodes");
    assert_eq!(
        decode_device_checkpoint(&bytes).expect("our own encoding decodes"),
        checkpoint
    );
});

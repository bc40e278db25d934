//! Entry points for the fuzz targets (feature `fuzzing`): the parsers of
//! untrusted input that are not otherwise public.

use crate::device::DeviceCheckpoint;
use nodeplugins_api::checkpoint::{DecodeError, decode, encode};

/// The bytes of a device checkpoint file holding `data`.
pub fn encode_device_checkpoint(data: &DeviceCheckpoint) -> Result<Vec<u8>, serde_json::Error> {
    encode(data)
}

/// Verifies and parses a device checkpoint file's bytes.
pub fn decode_device_checkpoint(bytes: &[u8]) -> Result<DeviceCheckpoint, DecodeError> {
    decode(bytes)
}

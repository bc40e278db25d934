//! The gRPC codec of the pod-resources server: requests are decoded with
//! prost; answers go out as bytes the view encoded once (a protobuf
//! message is its bytes, so a cached answer costs a copy, not a rebuild).

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Decodes requests of type `D`; encodes answers given as encoded bytes.
pub(crate) struct EncodedCodec<D>(PhantomData<D>);

impl<D> Default for EncodedCodec<D> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<D: prost::Message + Default + Send + 'static> Codec for EncodedCodec<D> {
    type Encode = Bytes;
    type Decode = D;
    type Encoder = BytesEncoder;
    type Decoder = RequestDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// Writes an already encoded message.
pub(crate) struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

/// Decodes a request message.
pub(crate) struct RequestDecoder<D>(PhantomData<D>);

impl<D: prost::Message + Default> Decoder for RequestDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        let message = D::decode(src.copy_to_bytes(src.remaining()))
            .map_err(|e| Status::internal(format!("cannot decode the request: {e}")))?;
        Ok(Some(message))
    }
}

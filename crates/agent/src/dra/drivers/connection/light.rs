//! A light connection: the HTTP/2 handshake with a plugin's gRPC server and
//! nothing more, kept open to see the plugin go away.
//!
//! An instance that is never called needs no HTTP/2 client (a frame writer
//! and reader with 28 KiB of buffers, header tables and a dispatch task per
//! connection, multiplied by every registered driver). Its connection only
//! has to be one the server accepts and keeps: the client preface and
//! SETTINGS, the server's SETTINGS acknowledged, and then a few small frames
//! answered (SETTINGS again, PING) until the connection ends. That is a
//! socket and a few hundred bytes; the first call upgrades the instance to a
//! full client connection ([`super::handshake`]).

use std::path::Path;
use std::sync::Arc;

use bytes::{Buf, BufMut, BytesMut};
use nodeplugins_api::transport::connect_unix;
use nodeplugins_api::transport::frame::{
    FrameHeader, HEADER_LEN, MAX_PAYLOAD, PREFACE, flag, kind,
};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use super::error::{ConnectError, ConnectionEnd};

/// Our SETTINGS: push disabled (a client's usual first frame; the rest are
/// the defaults).
const CLIENT_SETTINGS: [u8; 6] = [0, 0x2, 0, 0, 0, 0];
/// An empty SETTINGS frame with the ACK flag.
const SETTINGS_ACK: FrameHeader = FrameHeader::connection(kind::SETTINGS, flag::ACK, 0);
/// A PING acknowledgement's header; the PING's 8 bytes follow.
const PING_ACK: FrameHeader = FrameHeader::connection(kind::PING, flag::ACK, 8);

/// An established light connection.
#[derive(Debug)]
pub(crate) struct LightConnection {
    stream: UnixStream,
    /// Bytes read but not yet parsed into whole frames.
    input: BytesMut,
    /// Answers not yet written.
    output: BytesMut,
}

impl LightConnection {
    /// Dials `endpoint`, sends the preface and SETTINGS, and waits for the
    /// server's SETTINGS: a socket in the listen backlog of a process that
    /// is exiting accepts the dial and the preface; only an answer shows a
    /// server is there.
    pub(crate) async fn handshake(endpoint: &Arc<Path>) -> Result<Self, ConnectError> {
        let path = || endpoint.clone();
        let mut stream = connect_unix(endpoint).map_err(|source| ConnectError::Dial {
            path: path(),
            source,
        })?;
        let mut hello = BytesMut::with_capacity(PREFACE.len() + HEADER_LEN + CLIENT_SETTINGS.len());
        hello.put_slice(PREFACE);
        FrameHeader::connection(kind::SETTINGS, 0, CLIENT_SETTINGS.len()).put(&mut hello);
        hello.put_slice(&CLIENT_SETTINGS);
        stream
            .write_all(&hello)
            .await
            .map_err(|e| ConnectError::Handshake {
                path: path(),
                source: ConnectionEnd::Io(e),
            })?;
        let mut connection = Self {
            stream,
            input: BytesMut::new(),
            output: BytesMut::new(),
        };
        match connection.next_frame().await {
            Ok(frame) if frame.header.kind == kind::SETTINGS && !frame.header.has(flag::ACK) => {
                SETTINGS_ACK.put(&mut connection.output);
                Ok(connection)
            }
            Ok(frame) => Err(ConnectError::NotSettings {
                path: path(),
                kind: frame.header.kind,
            }),
            Err(ConnectionEnd::Closed) => Err(ConnectError::ClosedBeforeAnswer { path: path() }),
            Err(end) => Err(ConnectError::Handshake {
                path: path(),
                source: end,
            }),
        }
    }

    /// Answers what the server sends until the connection ends, and says
    /// why it ended. Cancel-safe: dropping the future loses nothing, and
    /// calling it again carries on.
    pub(crate) async fn closed(&mut self) -> ConnectionEnd {
        loop {
            match self.next_frame().await {
                Ok(frame) => {
                    if let Some(end) = self.answer(&frame) {
                        return end;
                    }
                }
                Err(end) => return end,
            }
        }
    }

    /// Queues the answer a frame needs, or says the connection is over.
    fn answer(&mut self, frame: &Frame) -> Option<ConnectionEnd> {
        let acknowledges = frame.header.has(flag::ACK);
        match frame.header.kind {
            kind::SETTINGS if !acknowledges => SETTINGS_ACK.put(&mut self.output),
            kind::PING if !acknowledges => {
                PING_ACK.put(&mut self.output);
                self.output.put_slice(&frame.ping_data);
            }
            kind::GOAWAY => return Some(ConnectionEnd::GoAway(frame.goaway_code)),
            // SETTINGS and PING acknowledgements, WINDOW_UPDATE, and frames
            // of streams (there are none): nothing to answer.
            _ => {}
        }
        None
    }

    /// Writes queued answers, then reads until a whole frame is in.
    async fn next_frame(&mut self) -> Result<Frame, ConnectionEnd> {
        loop {
            while !self.output.is_empty() {
                match self.stream.try_write(&self.output) {
                    Ok(n) => self.output.advance(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        self.stream.writable().await.map_err(ConnectionEnd::Io)?;
                    }
                    Err(e) => return Err(ConnectionEnd::Io(e)),
                }
            }
            if let Some(frame) = self.parse()? {
                return Ok(frame);
            }
            self.stream.readable().await.map_err(ConnectionEnd::Io)?;
            // Room for the rest of the frame being read, or a header.
            let want = match FrameHeader::peek(&self.input) {
                Some(header) => header.len + HEADER_LEN - self.input.len(),
                None => HEADER_LEN - self.input.len(),
            };
            self.input.reserve(want.max(64));
            match self.stream.try_read_buf(&mut self.input) {
                Ok(0) => return Err(ConnectionEnd::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(ConnectionEnd::Io(e)),
            }
        }
    }

    /// The first whole frame in the input, taken off it.
    fn parse(&mut self) -> Result<Option<Frame>, ConnectionEnd> {
        let Some(header) = FrameHeader::peek(&self.input) else {
            return Ok(None);
        };
        let len = header.len;
        if len > MAX_PAYLOAD {
            return Err(ConnectionEnd::FrameTooLarge(len));
        }
        if self.input.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let mut payload = self.input.split_to(HEADER_LEN + len);
        payload.advance(HEADER_LEN);
        let mut parsed = Frame {
            header,
            ping_data: [0; 8],
            goaway_code: 0,
        };
        match header.kind {
            kind::PING if len != 8 => {
                return Err(ConnectionEnd::BadPing(len));
            }
            kind::PING => parsed.ping_data.copy_from_slice(&payload),
            kind::GOAWAY if len >= 8 => {
                parsed.goaway_code =
                    u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
            }
            _ => {}
        }
        if self.input.is_empty() {
            // Give back what a large frame needed.
            self.input = BytesMut::new();
        }
        Ok(Some(parsed))
    }
}

/// One frame, as much of it as matters here.
#[derive(Debug)]
struct Frame {
    header: FrameHeader,
    /// A PING's payload, echoed in its acknowledgement.
    ping_data: [u8; 8],
    /// A GOAWAY's error code.
    goaway_code: u32,
}

#[cfg(test)]
mod tests;

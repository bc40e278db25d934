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

use bytes::{Buf, BufMut, BytesMut};
use nodeplugins_api::transport::connect_unix;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

/// The HTTP/2 client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types (RFC 9113 §6).
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
/// The ACK flag of SETTINGS and PING.
const ACK: u8 = 0x1;
/// A frame header's length.
const HEADER: usize = 9;
/// The largest frame a peer may send before we say otherwise
/// (SETTINGS_MAX_FRAME_SIZE's initial value).
const MAX_FRAME: usize = 16_384;

/// Our SETTINGS: push disabled (a client's usual first frame; the rest are
/// the defaults).
const CLIENT_SETTINGS: [u8; HEADER + 6] = [0, 0, 6, SETTINGS, 0, 0, 0, 0, 0, 0, 0x2, 0, 0, 0, 0];
/// An empty SETTINGS frame with the ACK flag.
const SETTINGS_ACK: [u8; HEADER] = [0, 0, 0, SETTINGS, ACK, 0, 0, 0, 0];

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
    pub(crate) async fn handshake(endpoint: &Path) -> Result<Self, String> {
        let mut stream =
            connect_unix(endpoint).map_err(|e| format!("dial {}: {e}", endpoint.display()))?;
        let mut hello = BytesMut::with_capacity(PREFACE.len() + CLIENT_SETTINGS.len());
        hello.put_slice(PREFACE);
        hello.put_slice(&CLIENT_SETTINGS);
        stream
            .write_all(&hello)
            .await
            .map_err(|e| format!("HTTP/2 handshake with {}: {e}", endpoint.display()))?;
        let mut connection = Self {
            stream,
            input: BytesMut::new(),
            output: BytesMut::new(),
        };
        match connection.next_frame().await {
            Ok(Frame {
                kind: SETTINGS,
                flags,
                ..
            }) if flags & ACK == 0 => {
                connection.output.put_slice(&SETTINGS_ACK);
                Ok(connection)
            }
            Ok(frame) => Err(format!(
                "HTTP/2 handshake with {}: the server's first frame is of type {:#x}, not SETTINGS",
                endpoint.display(),
                frame.kind
            )),
            Err(end) => Err(match end {
                End::Closed => {
                    format!(
                        "{} closed the connection before answering",
                        endpoint.display()
                    )
                }
                End::Failed(why) => format!("HTTP/2 handshake with {}: {why}", endpoint.display()),
            }),
        }
    }

    /// Answers what the server sends until the connection ends, and says
    /// why it ended. Cancel-safe: dropping the future loses nothing, and
    /// calling it again carries on.
    pub(crate) async fn closed(&mut self) -> String {
        loop {
            match self.next_frame().await {
                Ok(frame) => {
                    if let Some(end) = self.answer(&frame) {
                        return end;
                    }
                }
                Err(End::Closed) => return "the plugin closed the connection".to_string(),
                Err(End::Failed(why)) => return why,
            }
        }
    }

    /// Queues the answer a frame needs, or says the connection is over.
    fn answer(&mut self, frame: &Frame) -> Option<String> {
        match (frame.kind, frame.flags & ACK) {
            (SETTINGS, 0) => self.output.put_slice(&SETTINGS_ACK),
            (PING, 0) => {
                self.output.put_slice(&[0, 0, 8, PING, ACK, 0, 0, 0, 0]);
                self.output.put_slice(&frame.ping_data);
            }
            (GOAWAY, _) => {
                return Some(format!(
                    "the plugin is closing the connection (GOAWAY, error code {})",
                    frame.goaway_code
                ));
            }
            // SETTINGS and PING acknowledgements, WINDOW_UPDATE, and frames
            // of streams (there are none): nothing to answer.
            _ => {}
        }
        None
    }

    /// Writes queued answers, then reads until a whole frame is in.
    async fn next_frame(&mut self) -> Result<Frame, End> {
        loop {
            while !self.output.is_empty() {
                match self.stream.try_write(&self.output) {
                    Ok(n) => self.output.advance(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        self.stream.writable().await.map_err(failed)?;
                    }
                    Err(e) => return Err(failed(e)),
                }
            }
            if let Some(frame) = self.parse()? {
                return Ok(frame);
            }
            self.stream.readable().await.map_err(failed)?;
            // Room for the rest of the frame being read, or a header.
            let want = match self.input.get(..3) {
                Some(len) => frame_len(len) + HEADER - self.input.len(),
                None => HEADER - self.input.len(),
            };
            self.input.reserve(want.max(64));
            match self.stream.try_read_buf(&mut self.input) {
                Ok(0) => return Err(End::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(failed(e)),
            }
        }
    }

    /// The first whole frame in the input, taken off it.
    fn parse(&mut self) -> Result<Option<Frame>, End> {
        let Some(header) = self.input.get(..HEADER) else {
            return Ok(None);
        };
        let len = frame_len(header);
        if len > MAX_FRAME {
            return Err(End::Failed(format!(
                "the plugin sent a frame of {len} bytes, more than the {MAX_FRAME} allowed"
            )));
        }
        if self.input.len() < HEADER + len {
            return Ok(None);
        }
        let (kind, flags) = (header[3], header[4]);
        let mut frame = self.input.split_to(HEADER + len);
        frame.advance(HEADER);
        let mut parsed = Frame {
            kind,
            flags,
            ping_data: [0; 8],
            goaway_code: 0,
        };
        match kind {
            PING if len != 8 => {
                return Err(End::Failed(format!("a PING frame of {len} bytes, not 8")));
            }
            PING => parsed.ping_data.copy_from_slice(&frame),
            GOAWAY if len >= 8 => {
                parsed.goaway_code = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
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
    kind: u8,
    flags: u8,
    /// A PING's payload, echoed in its acknowledgement.
    ping_data: [u8; 8],
    /// A GOAWAY's error code.
    goaway_code: u32,
}

/// Why no further frame can be read.
enum End {
    /// The server closed the connection.
    Closed,
    /// Anything else, said as the reason.
    Failed(String),
}

fn failed(error: std::io::Error) -> End {
    End::Failed(error.to_string())
}

/// The length field of a frame header (24 bits).
fn frame_len(header: &[u8]) -> usize {
    (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2])
}

#[cfg(test)]
mod tests;

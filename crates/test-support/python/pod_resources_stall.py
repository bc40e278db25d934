"""A client that asks and never reads: opens one HTTP/2 connection to the
pod-resources socket with a flow-control window of zero, starts --calls
List calls on it (with a path-valued :authority) and never grants the
server room to send a byte of any answer. Prints STALLED once the server
has started a real answer to every call: response headers without
END_STREAM and without grpc-status, the answer's body then held up by flow
control. A call the server refuses (rate limit, unknown method) is answered
with headers too, but trailers-only (END_STREAM, grpc-status): that prints
"REFUSED <stream> <grpc-status>" and never counts as stalled. Holds the
connection until stdin closes. Prints GOT_DATA if the server ever sends
data (it cannot).
"""
import argparse
import socket
import sys
import threading

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, HeadersFrame, PingFrame,
                              SettingsFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
LIST = "/v1.PodResourcesLister/List"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--path", default=LIST, help="the method to call")
    args = parser.parse_args()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.socket)
    # SETTINGS_INITIAL_WINDOW_SIZE (4) = 0: no stream may carry data to us.
    sock.sendall(PREFACE + SettingsFrame(0, settings={4: 0}).serialize())
    encoder = hpack.Encoder()
    for i in range(args.calls):
        stream = 1 + 2 * i
        headers = [(":method", "POST"), (":scheme", "http"), (":path", args.path),
                   (":authority", args.socket), ("content-type", "application/grpc"),
                   ("te", "trailers")]
        sock.sendall(HeadersFrame(stream, data=encoder.encode(headers),
                                  flags=["END_HEADERS"]).serialize())
        sock.sendall(DataFrame(stream, data=b"\x00\x00\x00\x00\x00",
                               flags=["END_STREAM"]).serialize())

    # Streams whose response headers came, and those of them that started a
    # real answer.
    answered = set()
    started = set()
    buffer = b""
    decoder = hpack.Decoder()
    # A header block split over CONTINUATION frames: (stream, END_STREAM, bytes so far).
    pending = None

    def frames():
        nonlocal buffer
        while True:
            while len(buffer) < 9:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            frame, length = Frame.parse_frame_header(memoryview(buffer[:9]))
            while len(buffer) < 9 + length:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            frame.parse_body(memoryview(buffer[9:9 + length]))
            buffer = buffer[9 + length:]
            yield frame

    def on_headers(stream, end_stream, block):
        # Every block goes through the decoder, in order: HPACK state is per
        # connection.
        headers = {name.decode() if isinstance(name, bytes) else name:
                   value.decode() if isinstance(value, bytes) else value
                   for name, value in decoder.decode(block)}
        if stream in answered:
            return
        answered.add(stream)
        if end_stream or "grpc-status" in headers:
            print(f"REFUSED {stream} {headers.get('grpc-status', '')}", flush=True)
            return
        started.add(stream)
        if len(started) == args.calls:
            print("STALLED", flush=True)

    def read():
        nonlocal pending
        for frame in frames():
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                sock.sendall(PingFrame(0, data=frame.opaque_data, flags=["ACK"]).serialize())
            elif isinstance(frame, HeadersFrame):
                pending = (frame.stream_id, "END_STREAM" in frame.flags, frame.data)
            elif isinstance(frame, ContinuationFrame) and pending:
                pending = (pending[0], pending[1], pending[2] + frame.data)
            elif isinstance(frame, DataFrame) and frame.data:
                print("GOT_DATA", flush=True)
            if (isinstance(frame, (HeadersFrame, ContinuationFrame)) and pending
                    and "END_HEADERS" in frame.flags):
                on_headers(*pending)
                pending = None

    threading.Thread(target=read, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()

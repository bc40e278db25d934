"""A client that asks and never reads: opens one HTTP/2 connection to the
pod-resources socket with a flow-control window of zero, starts --calls
List calls on it (with a path-valued :authority) and never grants the
server room to send a byte of any answer. Prints STALLED once the server
has answered every call's headers, then holds the connection until stdin
closes. Prints GOT_DATA if the server ever sends data (it cannot).
"""
import argparse
import socket
import sys
import threading

import hpack
from hyperframe.frame import DataFrame, Frame, HeadersFrame, PingFrame, SettingsFrame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
LIST = "/v1.PodResourcesLister/List"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.socket)
    # SETTINGS_INITIAL_WINDOW_SIZE (4) = 0: no stream may carry data to us.
    sock.sendall(PREFACE + SettingsFrame(0, settings={4: 0}).serialize())
    encoder = hpack.Encoder()
    for i in range(args.calls):
        stream = 1 + 2 * i
        headers = [(":method", "POST"), (":scheme", "http"), (":path", LIST),
                   (":authority", args.socket), ("content-type", "application/grpc"),
                   ("te", "trailers")]
        sock.sendall(HeadersFrame(stream, data=encoder.encode(headers),
                                  flags=["END_HEADERS"]).serialize())
        sock.sendall(DataFrame(stream, data=b"\x00\x00\x00\x00\x00",
                               flags=["END_STREAM"]).serialize())

    answered = set()
    buffer = b""

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

    def read():
        for frame in frames():
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                sock.sendall(PingFrame(0, data=frame.opaque_data, flags=["ACK"]).serialize())
            elif isinstance(frame, HeadersFrame) and frame.stream_id not in answered:
                answered.add(frame.stream_id)
                if len(answered) == args.calls:
                    print("STALLED", flush=True)
            elif isinstance(frame, DataFrame) and frame.data:
                print("GOT_DATA", flush=True)

    threading.Thread(target=read, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()

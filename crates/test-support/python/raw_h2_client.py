"""Hand-crafted HTTP/2 requests with a path-valued :authority.

Encodes header blocks with the independent `hpack` package and frames with
`hyperframe`, covering what a client may legally send: Huffman and raw
literals, incremental indexing and later indexed references, never-indexed
fields, dynamic table size updates, CONTINUATION frames, padding and priority.
Each scenario calls Registration.GetInfo several times on one connection and
checks for HTTP 200, grpc-status 0 and the expected plugin name. Prints one
JSON line per scenario; exits non-zero if any failed.
"""
import argparse
import json
import socket
import sys

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame,
                              PingFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame)

from pluginregistration.v1 import api_pb2 as reg

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GET_INFO = "/pluginregistration.Registration/GetInfo"


class Connection:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.sock.sendall(PREFACE + SettingsFrame(0).serialize())
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.buffer = b""
        self.next_stream = 1

    def recv_exact(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_frame(self):
        frame, length = Frame.parse_frame_header(memoryview(self.recv_exact(9)))
        frame.parse_body(memoryview(self.recv_exact(length)))
        if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self.sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
        if isinstance(frame, PingFrame) and "ACK" not in frame.flags:
            self.sock.sendall(PingFrame(0, data=frame.opaque_data, flags=["ACK"]).serialize())
        return frame

    def send_block(self, stream_id, block, pieces=1, pad=None, priority=False):
        size = max(1, -(-len(block) // pieces))
        chunks = [block[i:i + size] for i in range(0, len(block), size)] or [b""]
        frames = []
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            if i == 0:
                flags = ["END_HEADERS"] if last else []
                frame = HeadersFrame(stream_id, data=chunk, flags=flags)
                if pad is not None:
                    frame.flags.add("PADDED")
                    frame.pad_length = pad
                if priority:
                    frame.flags.add("PRIORITY")
                    frame.depends_on = 0
                    frame.stream_weight = 200
            else:
                frame = ContinuationFrame(stream_id, data=chunk, flags=["END_HEADERS"] if last else [])
            frames.append(frame.serialize())
        self.sock.sendall(b"".join(frames))

    def call_get_info(self, authority, huffman=True, sensitive=False, pieces=1, pad=None,
                      priority=False, table_size=None):
        stream_id = self.next_stream
        self.next_stream += 2
        if table_size is not None:
            self.encoder.header_table_size = table_size
        auth = (hpack.NeverIndexedHeaderTuple(":authority", authority) if sensitive
                else (":authority", authority))
        headers = [(":method", "POST"), (":scheme", "http"), (":path", GET_INFO), auth,
                   ("content-type", "application/grpc"), ("te", "trailers"),
                   ("user-agent", "grpc-go/1.72.0")]
        self.send_block(stream_id, self.encoder.encode(headers, huffman=huffman),
                        pieces=pieces, pad=pad, priority=priority)
        self.sock.sendall(DataFrame(stream_id, data=b"\x00\x00\x00\x00\x00",
                                    flags=["END_STREAM"]).serialize())
        return self.read_response(stream_id)

    def read_response(self, stream_id):
        headers, body, block, end_stream = [], b"", b"", False
        while True:
            frame = self.read_frame()
            if isinstance(frame, GoAwayFrame):
                raise ConnectionError("GOAWAY error code %d" % frame.error_code)
            if frame.stream_id != stream_id:
                continue
            if isinstance(frame, RstStreamFrame):
                raise ConnectionError("RST_STREAM error code %d" % frame.error_code)
            if isinstance(frame, DataFrame):
                body += frame.data
                if frame.flow_controlled_length:
                    self.sock.sendall(WindowUpdateFrame(
                        0, window_increment=frame.flow_controlled_length).serialize())
            if isinstance(frame, HeadersFrame):
                end_stream = "END_STREAM" in frame.flags
            if isinstance(frame, (HeadersFrame, ContinuationFrame)):
                block += frame.data
                if "END_HEADERS" in frame.flags:
                    headers.extend(self.decoder.decode(block))
                    block = b""
                    if end_stream:
                        break
        fields = dict(headers)
        info = reg.PluginInfo()
        if len(body) >= 5:
            info.ParseFromString(body[5:5 + int.from_bytes(body[1:5], "big")])
        return fields.get(":status"), fields.get("grpc-status"), info.name


def scenarios(authority):
    long_value = authority * 300
    return {
        "huffman-indexed-then-referenced": [dict()] * 3,
        "raw-literals": [dict(huffman=False)] * 3,
        "never-indexed": [dict(sensitive=True)] * 2,
        "continuation-padding-priority": [dict(pieces=4, pad=17, priority=True),
                                          dict(pieces=3, pad=0), dict(pieces=2, priority=True)],
        "table-size-updates": [dict(table_size=0), dict(), dict(table_size=4096), dict(table_size=256)],
        "huge-authority-over-16k": [dict(authority=long_value, huffman=False, pieces=3)],
        "mixed-valid-and-path": [dict(authority="localhost"), dict(), dict(authority="localhost")],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--authority", required=True)
    parser.add_argument("--expect-name", required=True)
    args = parser.parse_args()

    failed = 0
    for name, calls in scenarios(args.authority).items():
        results = []
        try:
            conn = Connection(args.socket)
            for call in calls:
                call = dict(call)
                authority = call.pop("authority", args.authority)
                results.append(conn.call_get_info(authority, **call))
            ok = all(r == ("200", "0", args.expect_name) for r in results)
        except Exception as e:  # noqa: BLE001 - report any failure as the scenario's result
            ok = False
            results.append(repr(e))
        failed += not ok
        print(json.dumps({"scenario": name, "ok": ok, "results": results}), flush=True)
    print("DONE")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

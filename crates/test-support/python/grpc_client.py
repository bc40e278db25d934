"""grpcio client for interop tests.

Calls Registration.GetInfo and NotifyRegistrationStatus (unary) and
DevicePlugin.GetDevicePluginOptions and ListAndWatch (server streaming) on ONE
channel to a Unix socket, optionally with a path-valued :authority as grpc-go
clients send. Prints one JSON line per call, then DONE.
"""
import argparse
import json
import sys

import grpc

from pluginregistration.v1 import api_pb2 as reg
from pluginregistration.v1 import api_pb2_grpc as reg_grpc
from deviceplugin.v1beta1 import api_pb2 as dp
from deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--authority", help="value for grpc.default_authority")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stream-messages", type=int, default=2)
    args = parser.parse_args()

    options = []
    if args.authority is not None:
        options.append(("grpc.default_authority", args.authority))
    channel = grpc.insecure_channel("unix://" + args.socket, options=options)
    registration = reg_grpc.RegistrationStub(channel)
    devices = dp_grpc.DevicePluginStub(channel)
    failures = 0
    for round_ in range(args.rounds):
        try:
            info = registration.GetInfo(reg.InfoRequest(), timeout=10)
            print(json.dumps({"call": "GetInfo", "round": round_, "ok": True, "name": info.name,
                              "type": info.type, "versions": list(info.supported_versions)}))
            registration.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True, error=""), timeout=10)
            print(json.dumps({"call": "NotifyRegistrationStatus", "round": round_, "ok": True}))
            options_ = devices.GetDevicePluginOptions(dp.Empty(), timeout=10)
            print(json.dumps({"call": "GetDevicePluginOptions", "round": round_, "ok": True,
                              "pre_start_required": options_.pre_start_required}))
            stream = devices.ListAndWatch(dp.Empty(), timeout=10)
            for i, update in enumerate(stream):
                print(json.dumps({"call": "ListAndWatch", "round": round_, "ok": True,
                                  "devices": [d.ID for d in update.devices]}))
                if i + 1 >= args.stream_messages:
                    stream.cancel()
                    break
        except grpc.RpcError as e:
            failures += 1
            print(json.dumps({"call": "error", "round": round_, "ok": False,
                              "code": str(e.code()), "details": e.details()}))
    print("DONE")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

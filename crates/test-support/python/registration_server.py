"""grpcio Registration server (a plugin written with an independent stack).

Serves pluginregistration.Registration on a Unix socket, prints READY when
listening and one NOTIFY JSON line per NotifyRegistrationStatus call.
"""
import argparse
import json
import signal
import sys
import threading
from concurrent import futures

import grpc

from output import say

import crash

from pluginregistration.v1 import api_pb2 as reg
from pluginregistration.v1 import api_pb2_grpc as reg_grpc


STEPS = ["get-info", "node-get-info", "notify"]


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, info, hang_get_info):
        self.info = info
        self.hang_get_info = hang_get_info

    def GetInfo(self, request, context):
        say("GETINFO")
        crash.point("get-info")
        if self.hang_get_info:
            threading.Event().wait()
        return self.info

    def NotifyRegistrationStatus(self, request, context):
        crash.point("notify")
        say("NOTIFY " + json.dumps({"registered": request.plugin_registered,
                                      "error": request.error}))
        return reg.RegistrationStatusResponse()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--type", default="CSIPlugin")
    parser.add_argument("--name", default="python.example.com")
    parser.add_argument("--endpoint", default="")
    parser.add_argument("--versions", default="1.0.0")
    parser.add_argument("--hang-get-info", action="store_true",
                        help="never answer GetInfo (a plugin stuck mid-registration)")
    crash.add_argument(parser, STEPS)
    args = parser.parse_args()
    crash.configure(args, STEPS)

    info = reg.PluginInfo(type=args.type, name=args.name, endpoint=args.endpoint,
                          supported_versions=[v for v in args.versions.split(",") if v])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    reg_grpc.add_RegistrationServicer_to_server(Registration(info, args.hang_get_info), server)
    if args.type == "CSIPlugin" and not args.endpoint:
        # The endpoint defaults to this socket, so serve CSI here too, as a
        # CSI driver with an embedded registrar would.
        from csi_driver import Identity, Node
        from csi.v1 import csi_pb2_grpc as csi_grpc
        csi_grpc.add_IdentityServicer_to_server(Identity(args.name), server)
        csi_grpc.add_NodeServicer_to_server(Node("py-node"), server)
    server.add_insecure_port("unix:" + args.socket)
    server.start()
    say("READY")

    def stop(*_):
        server.stop(0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.wait_for_termination()


if __name__ == "__main__":
    main()

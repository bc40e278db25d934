"""grpcio CSI driver (Identity and NodeGetInfo) on a Unix socket, a driver
written with an independent stack. Prints READY when listening."""
import argparse
import signal
import sys
from concurrent import futures

import grpc

from output import say

import crash
from google.protobuf import wrappers_pb2

from csi.v1 import csi_pb2 as csi
from csi.v1 import csi_pb2_grpc as csi_grpc


class Identity(csi_grpc.IdentityServicer):
    def __init__(self, name):
        self.name = name

    def GetPluginInfo(self, request, context):
        return csi.GetPluginInfoResponse(name=self.name, vendor_version="0.1")

    def GetPluginCapabilities(self, request, context):
        return csi.GetPluginCapabilitiesResponse()

    def Probe(self, request, context):
        return csi.ProbeResponse(ready=wrappers_pb2.BoolValue(value=True))


class Node(csi_grpc.NodeServicer):
    def __init__(self, node_id):
        self.node_id = node_id

    def NodeGetCapabilities(self, request, context):
        return csi.NodeGetCapabilitiesResponse()

    def NodeGetInfo(self, request, context):
        say("NODEGETINFO")
        crash.point("node-get-info")
        return csi.NodeGetInfoResponse(
            node_id=self.node_id, max_volumes_per_node=3,
            accessible_topology=csi.Topology(segments={"topology.py.example.com/rack": "r7"}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--name", default="py-csi.example.com")
    parser.add_argument("--node-id", default="py-node")
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    csi_grpc.add_IdentityServicer_to_server(Identity(args.name), server)
    csi_grpc.add_NodeServicer_to_server(Node(args.node_id), server)
    server.add_insecure_port("unix:" + args.socket)
    server.start()
    say("READY")
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(0), sys.exit(0)))
    server.wait_for_termination()


if __name__ == "__main__":
    main()

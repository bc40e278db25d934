"""grpcio DRA driver (a driver written with an independent stack).

Serves pluginregistration.Registration on a registration socket and the
DRAPlugin service (v1 or v1beta1) on its service socket. Each claim gets one
device named after its UID; claims named fail* are refused. Prints READY when
both sockets listen and one PREPARE/UNPREPARE line per claim.
"""
import argparse
import signal
import sys
from concurrent import futures

import grpc

from output import say

import crash

from pluginregistration.v1 import api_pb2 as reg
from pluginregistration.v1 import api_pb2_grpc as reg_grpc


STEPS = ["get-info", "notify", "prepare", "unprepare"]


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, info):
        self.info = info

    def GetInfo(self, request, context):
        crash.point("get-info")
        return self.info

    def NotifyRegistrationStatus(self, request, context):
        crash.point("notify")
        say("NOTIFY registered=%s error=%s" % (request.plugin_registered, request.error))
        return reg.RegistrationStatusResponse()


def dra_servicer(api, name):
    if api == "v1":
        from dra.v1 import api_pb2 as pb
        from dra.v1 import api_pb2_grpc as pb_grpc
    else:
        from dra.v1beta1 import api_pb2 as pb
        from dra.v1beta1 import api_pb2_grpc as pb_grpc

    class Driver(pb_grpc.DRAPluginServicer):
        def NodePrepareResources(self, request, context):
            crash.point("prepare")
            response = pb.NodePrepareResourcesResponse()
            for claim in request.claims:
                say("PREPARE " + claim.uid)
                result = response.claims[claim.uid]
                if claim.name.startswith("fail"):
                    result.error = "python driver refuses " + claim.name
                    continue
                device = result.devices.add()
                device.pool_name = "py-pool"
                device.device_name = "py-" + claim.uid
                device.cdi_device_ids.append(name + "/gpu=py-" + claim.uid)
            return response

        def NodeUnprepareResources(self, request, context):
            crash.point("unprepare")
            response = pb.NodeUnprepareResourcesResponse()
            for claim in request.claims:
                say("UNPREPARE " + claim.uid)
                response.claims[claim.uid].error = ""
            return response

    return Driver(), pb_grpc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--registration-socket", required=True)
    parser.add_argument("--service-socket", required=True)
    parser.add_argument("--name", default="python.dra.example.com")
    parser.add_argument("--api", choices=["v1", "v1beta1"], default="v1")
    crash.add_argument(parser, STEPS)
    args = parser.parse_args()
    crash.configure(args, STEPS)

    info = reg.PluginInfo(type="DRAPlugin", name=args.name, endpoint=args.service_socket,
                          supported_versions=[args.api + ".DRAPlugin"])
    service = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    driver, pb_grpc = dra_servicer(args.api, args.name)
    pb_grpc.add_DRAPluginServicer_to_server(driver, service)
    service.add_insecure_port("unix:" + args.service_socket)
    service.start()

    registration = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    reg_grpc.add_RegistrationServicer_to_server(Registration(info), registration)
    registration.add_insecure_port("unix:" + args.registration_socket)
    registration.start()
    say("READY")

    def stop(*_):
        registration.stop(0)
        service.stop(0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    service.wait_for_termination()


if __name__ == "__main__":
    main()

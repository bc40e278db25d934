"""grpcio device plugin: serves v1beta1.DevicePlugin on a socket in the
device plugin directory, then registers through kubelet.sock dialing it by
path, with the socket path as :authority, as most Go device plugins do.
Prints REGISTERED or REGISTER-FAILED <details>, then serves until killed.
SIGUSR1 makes it send its device list again, so a crash can be placed
mid-stream (--crash-at list-and-watch:2)."""
import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc

from output import say

import crash

from deviceplugin.v1beta1 import api_pb2 as dp
from deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc


STEPS = ["list-and-watch", "preferred", "allocate", "pre-start"]


class Plugin(dp_grpc.DevicePluginServicer):
    def __init__(self, devices, options):
        self.devices = devices
        self.options = options
        self.resend = threading.Event()

    def GetDevicePluginOptions(self, request, context):
        return self.options

    def ListAndWatch(self, request, context):
        listing = dp.ListAndWatchResponse(devices=[
            dp.Device(ID=d, health="Healthy", topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=i % 2)]))
            for i, d in enumerate(self.devices)])
        while True:
            crash.point("list-and-watch")
            yield listing
            self.resend.wait()
            self.resend.clear()

    def GetPreferredAllocation(self, request, context):
        crash.point("preferred")
        response = dp.PreferredAllocationResponse()
        for r in request.container_requests:
            chosen = list(r.must_include_deviceIDs)
            chosen += [d for d in r.available_deviceIDs if d not in chosen][:r.allocation_size - len(chosen)]
            response.container_responses.add(deviceIDs=chosen)
        return response

    def PreStartContainer(self, request, context):
        crash.point("pre-start")
        say("PRESTART " + ",".join(request.devices_ids))
        return dp.PreStartContainerResponse()

    def Allocate(self, request, context):
        crash.point("allocate")
        return dp.AllocateResponse(container_responses=[
            dp.ContainerAllocateResponse(envs={"PY_DEVICES": ",".join(r.devices_ids)})
            for r in request.container_requests])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, help="the device plugin directory")
    parser.add_argument("--resource", default="python.example.com/dev")
    parser.add_argument("--socket-name", default="py-dev.sock")
    parser.add_argument("--devices", type=int, default=3)
    parser.add_argument("--pre-start", action="store_true", help="ask for PreStartContainer calls")
    crash.add_argument(parser, STEPS)
    args = parser.parse_args()
    crash.configure(args, STEPS)

    options = dp.DevicePluginOptions(pre_start_required=args.pre_start,
                                     get_preferred_allocation_available=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    plugin = Plugin([f"py-{i}" for i in range(args.devices)], options)
    dp_grpc.add_DevicePluginServicer_to_server(plugin, server)
    signal.signal(signal.SIGUSR1, lambda *_: plugin.resend.set())
    server.add_insecure_port(f"unix:{args.dir}/{args.socket_name}")
    server.start()

    kubelet = f"{args.dir}/kubelet.sock"
    channel = grpc.insecure_channel("unix://" + kubelet, options=[("grpc.default_authority", kubelet)])
    try:
        dp_grpc.RegistrationStub(channel).Register(
            dp.RegisterRequest(version="v1beta1", endpoint=args.socket_name, resource_name=args.resource,
                               options=options),
            timeout=10)
        say("REGISTERED")
    except grpc.RpcError as e:
        say(f"REGISTER-FAILED {e.code()} {e.details()}")
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(0), sys.exit(0)))
    server.wait_for_termination()


if __name__ == "__main__":
    main()

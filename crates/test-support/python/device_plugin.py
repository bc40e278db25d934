"""grpcio device plugin: serves v1beta1.DevicePlugin on a socket in the
device plugin directory, then registers through kubelet.sock dialing it by
path, with the socket path as :authority, as most Go device plugins do.
Prints REGISTERED or REGISTER-FAILED <details>, then serves until killed."""
import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc

from deviceplugin.v1beta1 import api_pb2 as dp
from deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc


class Plugin(dp_grpc.DevicePluginServicer):
    def __init__(self, devices):
        self.devices = devices

    def GetDevicePluginOptions(self, request, context):
        return dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        yield dp.ListAndWatchResponse(devices=[
            dp.Device(ID=d, health="Healthy", topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=i % 2)]))
            for i, d in enumerate(self.devices)])
        threading.Event().wait()

    def Allocate(self, request, context):
        return dp.AllocateResponse(container_responses=[
            dp.ContainerAllocateResponse(envs={"PY_DEVICES": ",".join(r.devices_ids)})
            for r in request.container_requests])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, help="the device plugin directory")
    parser.add_argument("--resource", default="python.example.com/dev")
    parser.add_argument("--socket-name", default="py-dev.sock")
    parser.add_argument("--devices", type=int, default=3)
    args = parser.parse_args()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    dp_grpc.add_DevicePluginServicer_to_server(Plugin([f"py-{i}" for i in range(args.devices)]), server)
    server.add_insecure_port(f"unix:{args.dir}/{args.socket_name}")
    server.start()

    kubelet = f"{args.dir}/kubelet.sock"
    channel = grpc.insecure_channel("unix://" + kubelet, options=[("grpc.default_authority", kubelet)])
    try:
        dp_grpc.RegistrationStub(channel).Register(
            dp.RegisterRequest(version="v1beta1", endpoint=args.socket_name, resource_name=args.resource,
                               options=dp.DevicePluginOptions(get_preferred_allocation_available=True)),
            timeout=10)
        print("REGISTERED", flush=True)
    except grpc.RpcError as e:
        print(f"REGISTER-FAILED {e.code()} {e.details()}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(0), sys.exit(0)))
    server.wait_for_termination()


if __name__ == "__main__":
    main()

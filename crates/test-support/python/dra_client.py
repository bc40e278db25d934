"""grpcio client playing the kubelet against a DRA driver.

GetInfo on the registration socket, then NodePrepareResources and
NodeUnprepareResources through v1 and v1beta1 and the first health message
(v1 and v1alpha1) on the service socket, all with a path-valued :authority
as grpc-go sends when dialing a socket by its path. Prints one JSON line per
call, then DONE.
"""
import argparse
import json
import sys

import grpc

from pluginregistration.v1 import api_pb2 as reg
from pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra.v1 import api_pb2 as dra_v1
from dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra.v1beta1 import api_pb2 as dra_v1beta1
from dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dra_health.v1 import api_pb2 as health_v1
from dra_health.v1 import api_pb2_grpc as health_v1_grpc
from dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc


def channel(socket):
    return grpc.insecure_channel("unix://" + socket,
                                 options=[("grpc.default_authority", socket)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--registration", required=True)
    parser.add_argument("--service", required=True)
    args = parser.parse_args()

    info = reg_grpc.RegistrationStub(channel(args.registration)).GetInfo(reg.InfoRequest(),
                                                                         timeout=10)
    print(json.dumps({"call": "GetInfo", "type": info.type, "name": info.name,
                      "endpoint": info.endpoint, "versions": list(info.supported_versions)}))
    service = channel(args.service)
    for version, pb, stub in [("v1", dra_v1, dra_v1_grpc.DRAPluginStub(service)),
                              ("v1beta1", dra_v1beta1, dra_v1beta1_grpc.DRAPluginStub(service))]:
        claim = pb.Claim(namespace="ns", name="claim-" + version, uid="uid-" + version)
        prepared = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[claim]),
                                             timeout=10)
        result = prepared.claims[claim.uid]
        print(json.dumps({"call": "NodePrepareResources", "version": version,
                          "error": result.error,
                          "devices": [d.device_name for d in result.devices],
                          "cdi": [c for d in result.devices for c in d.cdi_device_ids]}))
        unprepared = stub.NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=[claim]), timeout=10)
        print(json.dumps({"call": "NodeUnprepareResources", "version": version,
                          "claims": list(unprepared.claims.keys()),
                          "error": unprepared.claims[claim.uid].error}))
    for version, pb, stub in [
            ("v1", health_v1, health_v1_grpc.DRAResourceHealthStub(service)),
            ("v1alpha1", health_v1alpha1, health_v1alpha1_grpc.DRAResourceHealthStub(service))]:
        stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=10)
        first = next(iter(stream))
        stream.cancel()
        print(json.dumps({"call": "NodeWatchResources", "version": version,
                          "devices": [[d.device.pool_name, d.device.device_name,
                                       pb.HealthStatus.Name(d.health)] for d in first.devices]}))
    print("DONE")
    sys.exit(0)


if __name__ == "__main__":
    main()

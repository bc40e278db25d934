"""grpcio client of the pod-resources API, from our own .proto files.

Calls v1 List, Get (for each --get NAMESPACE/NAME) and
GetAllocatableResources, and v1alpha1 List, on ONE channel to the socket,
with a path-valued :authority as the kubelet's Go client sends. Prints one
JSON line per call, with the answer in the API's field names, then DONE.
"""
import argparse
import json

import grpc
from google.protobuf import json_format

from podresources.v1 import api_pb2 as v1
from podresources.v1 import api_pb2_grpc as v1_grpc
from podresources.v1alpha1 import api_pb2 as v1alpha1
from podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc


def answer(message):
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--authority", help="value for grpc.default_authority")
    parser.add_argument("--get", action="append", default=[], help="NAMESPACE/NAME")
    args = parser.parse_args()

    options = []
    if args.authority is not None:
        options.append(("grpc.default_authority", args.authority))
    channel = grpc.insecure_channel("unix://" + args.socket, options=options)
    lister = v1_grpc.PodResourcesListerStub(channel)
    alpha = v1alpha1_grpc.PodResourcesListerStub(channel)

    def call(name, fn):
        try:
            print(json.dumps({"call": name, "ok": True, "response": answer(fn())}), flush=True)
        except grpc.RpcError as e:
            print(json.dumps({"call": name, "ok": False, "code": e.code().name,
                              "details": e.details()}), flush=True)

    call("List", lambda: lister.List(v1.ListPodResourcesRequest(), timeout=10))
    for pod in args.get:
        namespace, name = pod.split("/", 1)
        call("Get " + pod, lambda: lister.Get(
            v1.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace), timeout=10))
    call("GetAllocatableResources", lambda: lister.GetAllocatableResources(
        v1.AllocatableResourcesRequest(), timeout=10))
    call("v1alpha1 List", lambda: alpha.List(v1alpha1.ListPodResourcesRequest(), timeout=10))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()

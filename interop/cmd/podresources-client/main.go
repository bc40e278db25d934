// Command podresources-client reads a node's pod-resources API the way
// monitoring agents do: through the kubelet's own client
// (k8s.io/kubernetes/pkg/kubelet/apis/podresources GetV1Client and
// GetV1alpha1Client, which dial with a path-valued :authority) and the
// generated k8s.io/kubelet/pkg/apis/podresources stubs.
//
// It connects once and keeps the connection, as an agent would, and then
// answers requests on stdin (see internal/control):
//
//	{"id":"1","op":"list"}
//	{"id":"2","op":"get","namespace":"default","name":"pod-a"}
//	{"id":"3","op":"allocatable"}
//	{"id":"4","op":"list_v1alpha1"}
//
// with a "result" event carrying the response ("response") or the gRPC
// error ("error", "code"). It stops when stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/status"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
)

// maxMessageSize is what monitoring agents commonly allow (16 MiB).
const maxMessageSize = 16 * 1024 * 1024

func main() {
	socket := flag.String("socket", "", "the pod-resources socket (required)")
	timeout := flag.Duration("timeout", 10*time.Second, "the time allowed for each call")
	flag.Parse()
	if *socket == "" {
		fmt.Fprintln(os.Stderr, "podresources-client: --socket is required")
		os.Exit(2)
	}
	ctx := context.Background()
	endpoint := "unix://" + *socket
	client, conn, err := podresources.GetV1Client(ctx, endpoint, *timeout, maxMessageSize)
	if err != nil {
		events.Emit("failed", events.Fields{"error": err.Error()})
		os.Exit(1)
	}
	defer conn.Close()
	alpha, alphaConn, err := podresources.GetV1alpha1Client(ctx, endpoint, *timeout, maxMessageSize)
	if err != nil {
		events.Emit("failed", events.Fields{"error": err.Error()})
		os.Exit(1)
	}
	defer alphaConn.Close()
	events.Emit("started", events.Fields{"socket": *socket})

	control.Serve(os.Stdin, func(req control.Request) {
		var args struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		}
		_ = req.Decode(&args)
		callCtx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		var response any
		var err error
		switch req.Op {
		case "list":
			response, err = client.List(callCtx, &v1.ListPodResourcesRequest{})
		case "get":
			response, err = client.Get(callCtx, &v1.GetPodResourcesRequest{PodName: args.Name, PodNamespace: args.Namespace})
		case "allocatable":
			response, err = client.GetAllocatableResources(callCtx, &v1.AllocatableResourcesRequest{})
		case "list_v1alpha1":
			response, err = alpha.List(callCtx, &v1alpha1.ListPodResourcesRequest{})
		default:
			err = fmt.Errorf("unknown op %q", req.Op)
		}
		fields := events.Fields{"id": req.ID, "op": req.Op, "error": events.ErrorString(err)}
		if err != nil {
			fields["code"] = status.Code(err).String()
		} else {
			fields["response"] = response
		}
		events.Emit("result", fields)
	})
}

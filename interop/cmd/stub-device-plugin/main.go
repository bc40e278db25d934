// Command stub-device-plugin runs the kubelet's own device plugin stub
// (pkg/kubelet/cm/devicemanager/plugin/v1beta1, NewDevicePluginStub),
// unmodified: it serves the DevicePlugin service on its socket next to
// kubelet.sock and registers on kubelet.sock the way upstream plugins do
// (a bare-path dial, so a path-valued :authority). With --watch it follows
// kubelet.sock being re-created and restarts and registers again with the
// stub's own timing (a first retry after 10 s).
//
// Its Allocate answers one container response per request with the
// environment variable STUB_DEVICES (the device ids, comma-separated); its
// GetPreferredAllocation, when enabled, prefers the must-include devices
// and then the available ones from the end of the list, so a caller can see
// that the preference was used.
//
// It reports what it does as JSON lines (see internal/events) and takes
// {"op":"update","devices":[{"id":...,"health":...}]} and {"op":"register"}
// on stdin. It stops on SIGTERM, SIGINT or when stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	dpserver "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
)

func main() {
	klog.InitFlags(nil)
	kubeletSock := flag.String("kubelet-sock", "", "the kubelet's registration socket (required)")
	socket := flag.String("socket", "", "this plugin's socket (default: stub.sock next to kubelet.sock)")
	resource := flag.String("resource", "example.com/resource", "the extended resource name")
	devices := flag.String("devices", "Dev-1,Dev-2", "comma-separated device ids, all healthy at start")
	preStart := flag.Bool("prestart", false, "ask for PreStartContainer")
	preferred := flag.Bool("preferred", false, "offer GetPreferredAllocation")
	watch := flag.Bool("watch", false, "restart and register again when kubelet.sock is re-created")
	flag.Parse()
	if *kubeletSock == "" {
		fmt.Fprintln(os.Stderr, "stub-device-plugin: --kubelet-sock is required")
		os.Exit(2)
	}
	if *socket == "" {
		*socket = filepath.Join(filepath.Dir(*kubeletSock), "stub.sock")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx)

	var devs []*pluginapi.Device
	for _, id := range strings.Split(*devices, ",") {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	stub := dpserver.NewDevicePluginStub(logger, devs, *socket, *resource, *preStart, *preferred)
	stub.SetAllocFunc(allocate)
	stub.SetGetPreferredAllocFunc(prefer)
	if err := stub.Start(ctx); err != nil {
		events.Emit("failed", events.Fields{"step": "start", "error": err.Error()})
		os.Exit(1)
	}
	defer func() { _ = stub.Stop(logger) }()
	events.Emit("serving", events.Fields{"socket": *socket})
	register := func() {
		err := stub.Register(ctx, *kubeletSock, *resource, "")
		events.Emit("registered", events.Fields{"resource": *resource, "error": events.ErrorString(err)})
	}
	register()
	if *watch {
		go stub.Watch(ctx, *kubeletSock, *resource, "")
	}

	go func() {
		control.Serve(os.Stdin, func(req control.Request) {
			switch req.Op {
			case "update":
				var args struct {
					Devices []struct {
						ID     string `json:"id"`
						Health string `json:"health"`
					} `json:"devices"`
				}
				if err := req.Decode(&args); err != nil {
					events.Emit("result", events.Fields{"id": req.ID, "op": req.Op, "error": err.Error()})
					return
				}
				updated := make([]*pluginapi.Device, 0, len(args.Devices))
				for _, d := range args.Devices {
					updated = append(updated, &pluginapi.Device{ID: d.ID, Health: d.Health})
				}
				// Update hands the list to a running ListAndWatch stream and
				// blocks until one takes it.
				go func() {
					stub.Update(updated)
					events.Emit("result", events.Fields{"id": req.ID, "op": req.Op})
				}()
			case "register":
				register()
			default:
				events.Emit("result", events.Fields{"id": req.ID, "op": req.Op, "error": "unknown op"})
			}
		})
		stop()
	}()
	<-ctx.Done()
}

func allocate(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	var response pluginapi.AllocateResponse
	for _, req := range r.ContainerRequests {
		events.Emit("allocate", events.Fields{"devices": req.DevicesIds})
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"STUB_DEVICES": strings.Join(req.DevicesIds, ",")},
		})
	}
	return &response, nil
}

func prefer(r *pluginapi.PreferredAllocationRequest, _ map[string]*pluginapi.Device) (*pluginapi.PreferredAllocationResponse, error) {
	var response pluginapi.PreferredAllocationResponse
	for _, req := range r.ContainerRequests {
		chosen := append([]string(nil), req.MustIncludeDeviceIDs...)
		for i := len(req.AvailableDeviceIDs) - 1; i >= 0 && int32(len(chosen)) < req.AllocationSize; i-- {
			id := req.AvailableDeviceIDs[i]
			if !contains(chosen, id) {
				chosen = append(chosen, id)
			}
		}
		events.Emit("preferred", events.Fields{"available": req.AvailableDeviceIDs, "must_include": req.MustIncludeDeviceIDs, "size": req.AllocationSize, "chosen": chosen})
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: chosen})
	}
	return &response, nil
}

func contains(list []string, id string) bool {
	for _, v := range list {
		if v == id {
			return true
		}
	}
	return false
}

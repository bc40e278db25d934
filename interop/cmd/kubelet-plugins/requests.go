package main

import (
	"context"
	"fmt"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
)

// requestHandler carries out control requests through the kubelet's own
// clients: the DRA plugin manager's DRAPlugin (which picks v1 or v1beta1 as
// negotiated at registration) and the device-plugin server's client.
type requestHandler struct {
	ctx     context.Context
	dra     *draplugin.DRAPluginManager
	devices *devicePlugins
}

// request is every field a control line may carry; each op reads its own.
type request struct {
	Driver      string           `json:"driver"`
	Claims      []*drapbv1.Claim `json:"claims"`
	Resource    string           `json:"resource"`
	Devices     []string         `json:"devices"`
	Available   []string         `json:"available"`
	MustInclude []string         `json:"must_include"`
	Size        int32            `json:"size"`
}

const callTimeout = 30 * time.Second

// handle runs each request in its own goroutine, so a plugin that hangs
// blocks only its own request; the answer is a "result" event.
func (h *requestHandler) handle(req control.Request) {
	var args request
	if err := req.Decode(&args); err != nil {
		events.Emit("result", events.Fields{"id": req.ID, "op": req.Op, "error": "bad request: " + err.Error()})
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(h.ctx, callTimeout)
		defer cancel()
		start := time.Now()
		response, err := h.call(ctx, req.Op, args)
		events.Emit("result", events.Fields{
			"id":          req.ID,
			"op":          req.Op,
			"response":    response,
			"error":       events.ErrorString(err),
			"duration_ns": time.Since(start).Nanoseconds(),
		})
	}()
}

func (h *requestHandler) call(ctx context.Context, op string, args request) (any, error) {
	switch op {
	case "prepare", "unprepare":
		plugin, err := h.dra.GetPlugin(args.Driver)
		if err != nil {
			return nil, err
		}
		if op == "prepare" {
			return plugin.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: args.Claims})
		}
		return plugin.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: args.Claims})
	case "allocate", "preferred", "prestart":
		client, err := h.devices.client(args.Resource)
		if err != nil {
			return nil, err
		}
		switch op {
		case "allocate":
			return client.Allocate(ctx, &pluginapi.AllocateRequest{
				ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: args.Devices}},
			})
		case "preferred":
			return client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
				ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
					AvailableDeviceIDs:   args.Available,
					MustIncludeDeviceIDs: args.MustInclude,
					AllocationSize:       args.Size,
				}},
			})
		default:
			return client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: args.Devices})
		}
	default:
		return nil, fmt.Errorf("unknown op %q", op)
	}
}

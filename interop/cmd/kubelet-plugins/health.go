package main

import (
	"context"
	"errors"
	"io"

	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"nodeplugins/interop/internal/events"
)

// healthRecorder is the DRA plugin manager's stream handler: it reports
// every device health message a driver sends.
type healthRecorder struct{}

func (healthRecorder) HandleWatchResourcesStream(ctx context.Context, stream drahealthv1.DRAResourceHealth_NodeWatchResourcesClient, driver string) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			events.Emit("dra_health_stream_ended", events.Fields{"driver": driver, "error": err.Error()})
			return err
		}
		devices := make([]events.Fields, 0, len(resp.Devices))
		for _, d := range resp.Devices {
			devices = append(devices, events.Fields{
				"pool":    d.GetDevice().GetPoolName(),
				"device":  d.GetDevice().GetDeviceName(),
				"health":  d.GetHealth().String(),
				"message": d.GetMessage(),
			})
		}
		events.Emit("dra_health", events.Fields{"driver": driver, "devices": devices})
	}
}

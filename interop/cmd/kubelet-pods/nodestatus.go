package main

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

	"nodeplugins/interop/internal/events"
)

const (
	// capacityPoll is how often the device manager's capacity is read. The
	// kubelet reads it at each node status update (every 10 s by default);
	// polling faster only shortens the wait for the scheduler.
	capacityPoll = 100 * time.Millisecond
	// statusRetry is the wait after a failed patch of the node's status.
	statusRetry = time.Second
)

// syncNodeStatus keeps the device-plugin resources of the node's status
// equal to the device manager's GetCapacity, as the kubelet's node status
// setter does: a resource's capacity counts all its devices and its
// allocatable the healthy ones; a resource the manager reports removed
// (its plugin gone past the grace period) stays in the status with 0, to
// mark it as one that device plugins manage. Only changed values are sent,
// as a strategic merge patch of nodes/NAME/status, which a node identity
// may send for its own node.
func syncNodeStatus(ctx context.Context, client kubernetes.Interface, nodeName string, devices *devicemanager.ManagerImpl) {
	logger := klog.FromContext(ctx)
	// What the status should say and what it was last patched to say.
	capacity, allocatable := map[string]int64{}, map[string]int64{}
	sentCapacity, sentAllocatable := map[string]int64{}, map[string]int64{}
	lastError := ""
	ticker := time.NewTicker(capacityPoll)
	defer ticker.Stop()
	for {
		current, currentAllocatable, removed := devices.GetCapacity(logger)
		// GetCapacity reports a removed resource once only: remember it.
		for _, name := range removed {
			capacity[name] = 0
			allocatable[name] = 0
		}
		for name, quantity := range current {
			capacity[string(name)] = quantity.Value()
			allocatable[string(name)] = quantity.Value()
		}
		for name, quantity := range currentAllocatable {
			allocatable[string(name)] = quantity.Value()
		}
		wait := ticker.C
		if !maps.Equal(capacity, sentCapacity) || !maps.Equal(allocatable, sentAllocatable) {
			err := patchNodeStatus(ctx, client, nodeName, capacity, allocatable)
			switch {
			case err == nil:
				sentCapacity, sentAllocatable = maps.Clone(capacity), maps.Clone(allocatable)
				lastError = ""
				events.Emit("node_status", events.Fields{"capacity": quantities(capacity), "allocatable": quantities(allocatable)})
			case ctx.Err() != nil:
				return
			default:
				if err.Error() != lastError {
					lastError = err.Error()
					events.Emit("node_status_failed", events.Fields{"error": lastError})
				}
				logger.Error(err, "Patching the node status failed", "node", nodeName)
				wait = time.After(statusRetry)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		}
	}
}

func patchNodeStatus(ctx context.Context, client kubernetes.Interface, nodeName string, capacity, allocatable map[string]int64) error {
	patch := map[string]any{"status": map[string]any{
		"capacity":    resourceList(capacity),
		"allocatable": resourceList(allocatable),
	}}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

func resourceList(values map[string]int64) v1.ResourceList {
	list := v1.ResourceList{}
	for name, value := range values {
		list[v1.ResourceName(name)] = *resource.NewQuantity(value, resource.DecimalSI)
	}
	return list
}

// quantities is values as an event shows them: quantity strings.
func quantities(values map[string]int64) map[string]string {
	out := make(map[string]string, len(values))
	for name, value := range values {
		q := resource.NewQuantity(value, resource.DecimalSI)
		out[name] = q.String()
	}
	return out
}

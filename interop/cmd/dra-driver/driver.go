package main

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"nodeplugins/interop/internal/events"
)

// driver implements kubeletplugin.DRAPlugin for fake GPUs.
type driver struct {
	name    string
	pool    string
	devices int
	// claims is the fake clientset claims are added to, or nil with a real
	// API server.
	claims *fake.Clientset
}

var _ kubeletplugin.DRAPlugin = (*driver)(nil)

func deviceName(i int) string { return fmt.Sprintf("gpu-%d", i) }

func deviceOf(i int) resourceapi.Device {
	return resourceapi.Device{Name: deviceName(i)}
}

func (d *driver) cdiID(device string) string { return d.name + "/gpu=" + device }

// PrepareResourceClaims gives each claim the devices its allocation names
// for this driver, with their CDI ids.
func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var prepared kubeletplugin.PrepareResult
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			prepared.Devices = append(prepared.Devices, kubeletplugin.Device{
				Requests:     []string{r.Request},
				PoolName:     r.Pool,
				DeviceName:   r.Device,
				CDIDeviceIDs: []string{d.cdiID(r.Device)},
			})
		}
		events.Emit("prepare", events.Fields{"namespace": claim.Namespace, "name": claim.Name, "uid": string(claim.UID), "devices": len(prepared.Devices)})
		result[claim.UID] = prepared
	}
	return result, nil
}

// UnprepareResourceClaims has nothing to undo for fake devices.
func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		events.Emit("unprepare", events.Fields{"namespace": claim.Namespace, "name": claim.Name, "uid": string(claim.UID)})
		result[claim.UID] = nil
	}
	return result, nil
}

// HandleError reports background errors; the helper keeps running.
func (d *driver) HandleError(_ context.Context, err error, msg string) {
	events.Emit("error", events.Fields{"message": msg, "error": err.Error()})
}

// WatchHealthStatus reports every device healthy, again within the
// kubelet's 30 s freshness window, until the stream ends.
func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	for {
		report := kubeletplugin.DeviceHealthReport{}
		for i := range d.devices {
			report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{
				PoolName:    d.pool,
				DeviceName:  deviceName(i),
				Health:      kubeletplugin.HealthStatusHealthy,
				LastUpdated: time.Now(),
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// addClaim puts an allocated claim into the fake clientset, with the given
// devices of this driver or, when none are given, the first device.
func (d *driver) addClaim(ctx context.Context, namespace, name, uid string, devices []string) error {
	if len(devices) == 0 {
		devices = []string{deviceName(0)}
	}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, device := range devices {
		results = append(results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu",
			Driver:  d.name,
			Pool:    d.pool,
			Device:  device,
		})
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}},
		},
	}
	_, err := d.claims.ResourceV1().ResourceClaims(namespace).Create(ctx, claim, metav1.CreateOptions{})
	return err
}

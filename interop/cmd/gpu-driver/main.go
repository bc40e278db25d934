// Command gpu-driver is the DRA driver of crates/sdk/examples/cluster_dra_driver.rs
// written on the official Go helper (k8s.io/dynamic-resource-allocation/kubeletplugin),
// doing the same: four GPUs published as a ResourceSlice pool named after the
// node, each claim prepared with the GPUs the scheduler allocated to it, a CDI
// spec file per claim (with GPU_MODE from an opaque configuration
// {"mode": ...} for the driver), prepared claims remembered across restarts,
// device health. The helper does the first and reads the claims; the rest is
// here.
//
// Usage (KUBECONFIG set): NODE_NAME=node-1 gpu-driver [ROOT] [CDI_DIR]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

const driverName = "dra.example.com"
const cdiKind = driverName + "/gpu"

var gpus = []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}

type gpuDriver struct {
	node, cdiDir, checkpoint string
	mu                       sync.Mutex
	prepared                 map[types.UID][]preparedGPU
}

// preparedGPU is a prepared GPU and the mode its configuration asked for.
type preparedGPU struct {
	kubeletplugin.Device
	Mode string
}

func devicesOf(prepared []preparedGPU) []kubeletplugin.Device {
	devices := make([]kubeletplugin.Device, 0, len(prepared))
	for _, g := range prepared {
		devices = append(devices, g.Device)
	}
	return devices
}

// mode is the mode of the last opaque configuration for this driver that
// applies to request (the claim's come after the class's).
func mode(claim *resourceapi.ResourceClaim, request string) (string, error) {
	mode := ""
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driverName || !appliesTo(c.Requests, request) {
			continue
		}
		var params struct {
			Mode string `json:"mode"`
		}
		if err := json.Unmarshal(c.Opaque.Parameters.Raw, &params); err != nil {
			return "", fmt.Errorf("configuration of claim %s: %w", claim.Name, err)
		}
		if params.Mode != "" {
			mode = params.Mode
		}
	}
	return mode, nil
}

// appliesTo tells whether a configuration for requests applies to a device
// allocated for request: all when none are named, a request's subrequests
// too.
func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	base, _, _ := strings.Cut(request, "/")
	for _, r := range requests {
		if r == request || r == base {
			return true
		}
	}
	return false
}

func (d *gpuDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		if devices, ok := d.prepared[claim.UID]; ok {
			result[claim.UID] = kubeletplugin.PrepareResult{Devices: devicesOf(devices)}
			continue
		}
		var devices []preparedGPU
		var err error
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != driverName {
				continue
			}
			var m string
			if m, err = mode(claim, r.Request); err != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "prepared %s %s\n", claim.UID, r.Device)
			devices = append(devices, preparedGPU{Device: kubeletplugin.Device{
				Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{cdiKind + "=" + string(claim.UID) + "-" + r.Device},
			}, Mode: m})
		}
		if err != nil {
			result[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		if err := d.writeSpec(claim.UID, devices); err != nil {
			result[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		d.prepared[claim.UID] = devices
		if err := d.save(); err != nil {
			delete(d.prepared, claim.UID)
			result[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		result[claim.UID] = kubeletplugin.PrepareResult{Devices: devicesOf(devices)}
	}
	return result, nil
}

func (d *gpuDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	result := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if err == nil || os.IsNotExist(err) {
			delete(d.prepared, claim.UID)
			err = d.save()
		}
		result[claim.UID] = err
	}
	return result, nil
}

func (d *gpuDriver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", msg, err)
}

func (d *gpuDriver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	for {
		var report kubeletplugin.DeviceHealthReport
		for _, gpu := range gpus {
			report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{
				PoolName: d.node, DeviceName: gpu, Health: kubeletplugin.HealthStatusHealthy, LastUpdated: time.Now(),
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
		case <-time.After(10 * time.Second):
		}
	}
}

func (d *gpuDriver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, "dra.example.com-gpu_"+string(uid)+".json")
}

func (d *gpuDriver) writeSpec(uid types.UID, devices []preparedGPU) error {
	type edits struct {
		Env []string `json:"env"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.6.0", Kind: cdiKind}
	for _, dev := range devices {
		env := []string{"GPU_DEVICE=" + dev.DeviceName}
		if dev.Mode != "" {
			env = append(env, "GPU_MODE="+dev.Mode)
		}
		spec.Devices = append(spec.Devices, device{
			Name:           string(uid) + "-" + dev.DeviceName,
			ContainerEdits: edits{Env: env},
		})
	}
	if err := os.MkdirAll(d.cdiDir, 0o755); err != nil {
		return err
	}
	return writeAtomically(d.specPath(uid), spec)
}

func (d *gpuDriver) save() error { return writeAtomically(d.checkpoint, d.prepared) }

// load reads the prepared claims and writes any missing CDI spec file again.
func (d *gpuDriver) load() error {
	data, err := os.ReadFile(d.checkpoint)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &d.prepared); err != nil {
		return fmt.Errorf("%s: %w", d.checkpoint, err)
	}
	for uid, devices := range d.prepared {
		if _, err := os.Stat(d.specPath(uid)); os.IsNotExist(err) {
			if err := d.writeSpec(uid, devices); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeAtomically(path string, value any) error {
	data, err := json.Marshal(value)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func main() {
	root, cdiDir := "/var/lib/kubelet", "/var/run/cdi"
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	if len(os.Args) > 2 {
		cdiDir = os.Args[2]
	}
	if err := run(root, cdiDir, os.Getenv("NODE_NAME")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(root, cdiDir, node string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	pluginDir := filepath.Join(root, "plugins", driverName)
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		return err
	}
	d := &gpuDriver{node: node, cdiDir: cdiDir, checkpoint: filepath.Join(pluginDir, "prepared.json"),
		prepared: map[types.UID][]preparedGPU{}}
	if err := d.load(); err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(root, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()
	var slice resourceslice.Slice
	for _, gpu := range gpus {
		slice.Devices = append(slice.Devices, resourceapi.Device{Name: gpu})
	}
	pools := map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{slice}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: pools}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

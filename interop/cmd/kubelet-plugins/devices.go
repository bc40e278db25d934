package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	dpserver "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"nodeplugins/interop/internal/events"
)

// devicePlugins is the client handler of the kubelet's device-plugin
// registration server: it keeps each connected plugin's client, as the
// device manager does, and reports connections and device lists.
type devicePlugins struct {
	mu      sync.Mutex
	plugins map[string]dpserver.DevicePlugin
}

func newDevicePlugins() *devicePlugins {
	return &devicePlugins{plugins: map[string]dpserver.DevicePlugin{}}
}

// PluginConnected asks for the plugin's options first, as the kubelet's
// device manager does, so a plugin that cannot answer is refused.
func (d *devicePlugins) PluginConnected(ctx context.Context, resource string, p dpserver.DevicePlugin) error {
	options, err := p.API().GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		events.Emit("device_plugin_refused", events.Fields{"resource": resource, "socket": p.SocketPath(), "error": err.Error()})
		return fmt.Errorf("failed to get device plugin options: %v", err)
	}
	d.mu.Lock()
	d.plugins[resource] = p
	d.mu.Unlock()
	events.Emit("device_plugin_connected", events.Fields{
		"resource":                 resource,
		"socket":                   p.SocketPath(),
		"pre_start_required":       options.PreStartRequired,
		"get_preferred_allocation": options.GetPreferredAllocationAvailable,
	})
	return nil
}

func (d *devicePlugins) PluginDisconnected(_ klog.Logger, resource, socket string) {
	d.mu.Lock()
	if p, ok := d.plugins[resource]; ok && p.SocketPath() == socket {
		delete(d.plugins, resource)
	}
	d.mu.Unlock()
	events.Emit("device_plugin_disconnected", events.Fields{"resource": resource, "socket": socket})
}

func (d *devicePlugins) PluginListAndWatchReceiver(_ klog.Logger, resource string, resp *pluginapi.ListAndWatchResponse) {
	devices := make([]events.Fields, 0, len(resp.Devices))
	for _, dev := range resp.Devices {
		var numa []int64
		for _, node := range dev.GetTopology().GetNodes() {
			numa = append(numa, node.GetID())
		}
		devices = append(devices, events.Fields{"id": dev.ID, "health": dev.Health, "numa": numa})
	}
	events.Emit("devices", events.Fields{"resource": resource, "devices": devices})
}

func (d *devicePlugins) client(resource string) (pluginapi.DevicePluginClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.plugins[resource]
	if !ok {
		return nil, fmt.Errorf("no device plugin connected for resource %s", resource)
	}
	return p.API(), nil
}

// socketCleaner is the registration handler's directory cleanup, done as
// the kubelet's device manager does it on start: every socket in the
// directory is removed (plugins notice the new kubelet.sock and register
// again); directories and other files stay.
type socketCleaner struct{}

func (socketCleaner) CleanupPluginDirectory(logger klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		path := filepath.Join(dir, entry.Name())
		info, err := os.Stat(path)
		if err != nil || info.IsDir() || info.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			logger.Error(err, "Failed to remove file", "path", path)
			return err
		}
	}
	return nil
}

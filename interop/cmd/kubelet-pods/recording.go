package main

import (
	"context"
	"time"

	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"

	"nodeplugins/interop/internal/events"
)

// recording wraps a kubelet plugin handler and reports each call the plugin
// manager makes to it, with its outcome, before the manager notifies the
// plugin.
type recording struct {
	kind  string
	inner cache.PluginHandler
}

var _ cache.PluginHandler = recording{}

func (r recording) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := r.inner.ValidatePlugin(ctx, name, endpoint, versions)
	if err != nil {
		events.Emit("validation_failed", events.Fields{"type": r.kind, "name": name, "endpoint": endpoint, "versions": versions, "error": err.Error()})
	}
	return err
}

func (r recording) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := r.inner.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	events.Emit("registered", events.Fields{"type": r.kind, "name": name, "endpoint": endpoint, "versions": versions, "error": events.ErrorString(err)})
	return err
}

func (r recording) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	r.inner.DeRegisterPlugin(ctx, name, endpoint)
	events.Emit("deregistered", events.Fields{"type": r.kind, "name": name, "endpoint": endpoint})
}

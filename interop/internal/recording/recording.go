// Package recording wraps a kubelet plugin handler so that each call the
// kubelet's plugin manager makes to it is reported as an event line (see
// internal/events), with its outcome, before the manager notifies the
// plugin: "registered" and "deregistered" with the plugin's type, name and
// endpoint, and "validation_failed" with the error.
package recording

import (
	"context"
	"time"

	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"

	"nodeplugins/interop/internal/events"
)

// Handler reports the calls to Inner, a handler of plugins of type Kind.
type Handler struct {
	Kind  string
	Inner cache.PluginHandler
}

var _ cache.PluginHandler = Handler{}

// ValidatePlugin reports a refusal.
func (r Handler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := r.Inner.ValidatePlugin(ctx, name, endpoint, versions)
	if err != nil {
		events.Emit("validation_failed", events.Fields{"type": r.Kind, "name": name, "endpoint": endpoint, "versions": versions, "error": err.Error()})
	}
	return err
}

// RegisterPlugin reports each registration and its error, if any.
func (r Handler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := r.Inner.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	events.Emit("registered", events.Fields{"type": r.Kind, "name": name, "endpoint": endpoint, "versions": versions, "error": events.ErrorString(err)})
	return err
}

// DeRegisterPlugin reports each deregistration.
func (r Handler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	r.Inner.DeRegisterPlugin(ctx, name, endpoint)
	events.Emit("deregistered", events.Fields{"type": r.Kind, "name": name, "endpoint": endpoint})
}

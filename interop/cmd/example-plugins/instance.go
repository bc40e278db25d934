package main

import (
	"context"
	"reflect"
	"sync"
	"time"
	"unsafe"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/pluginwatcher"

	"nodeplugins/interop/internal/events"
)

// examplePlugin is the kubelet's example plugin type, unexported upstream.
type examplePlugin = interface {
	Serve(ctx context.Context, services ...string) error
	Stop(ctx context.Context) error
}

// instance is one example plugin with the times a benchmark needs.
type instance struct {
	name      string
	plugin    examplePlugin
	statuses  <-chan registerapi.RegistrationStatus
	listening time.Time
	notified  time.Time
	// refused is the error of a first notification that said "not
	// registered", or "" when the plugin was registered.
	refused string
}

func newInstance(name, pluginType, socket string, versions []string) *instance {
	p := pluginwatcher.NewTestExamplePlugin(name, pluginType, socket, versions...)
	return &instance{name: name, plugin: p, statuses: statusChannel(p)}
}

// statusChannel returns the channel the example plugin's
// NotifyRegistrationStatus sends each status on. Upstream's own tests read
// it from inside the package; it is unexported, so it is reached here by
// reflection. The channel is unbuffered: without a reader, the plugin's
// NotifyRegistrationStatus would block forever.
func statusChannel(p any) <-chan registerapi.RegistrationStatus {
	field := reflect.ValueOf(p).Elem().FieldByName("registrationStatus")
	return *(*chan registerapi.RegistrationStatus)(unsafe.Pointer(field.UnsafeAddr()))
}

// serve starts the plugin and follows its notifications; registered is
// marked done on the first one.
func (i *instance) serve(ctx context.Context, round, index int, registered *sync.WaitGroup) error {
	if err := i.plugin.Serve(ctx); err != nil {
		registered.Done()
		return err
	}
	i.listening = time.Now()
	events.EmitAt("listening", i.listening, events.Fields{"round": round, "index": index, "name": i.name})
	go func() {
		first := true
		for {
			status, open := receive(i.statuses)
			if !open {
				return
			}
			at := time.Now()
			events.EmitAt("notified", at, events.Fields{
				"round":      round,
				"index":      index,
				"name":       i.name,
				"registered": status.PluginRegistered,
				"error":      status.Error,
				"latency_ns": at.Sub(i.listening).Nanoseconds(),
			})
			if first {
				i.notified = at
				if !status.PluginRegistered {
					i.refused = status.Error
					if i.refused == "" {
						i.refused = "not registered, no error given"
					}
				}
				first = false
				registered.Done()
			}
		}
	}()
	return nil
}

// stop stops the plugin and reports when it began ("stopping") and when it
// returned ("removed"). The socket goes in between: grpc's Stop closes the
// listener, which unlinks it, then the plugin removes it if still there.
func (i *instance) stop(ctx context.Context) {
	events.Emit("stopping", events.Fields{"name": i.name})
	if err := i.plugin.Stop(ctx); err != nil {
		events.Emit("stop_failed", events.Fields{"name": i.name, "error": err.Error()})
		return
	}
	events.Emit("removed", events.Fields{"name": i.name})
}

// receive takes the next status off the plugin's channel. The message
// holds a mutex and must not be copied as a value, so its two fields are
// read through reflection on the received value.
func receive(ch <-chan registerapi.RegistrationStatus) (status, bool) {
	v, open := reflect.ValueOf(ch).Recv()
	if !open {
		return status{}, false
	}
	return status{
		PluginRegistered: v.FieldByName("PluginRegistered").Bool(),
		Error:            v.FieldByName("Error").String(),
	}, true
}

// status is what a NotifyRegistrationStatus told the plugin.
type status struct {
	PluginRegistered bool
	Error            string
}

// Command example-plugins runs the kubelet's own example plugin
// (pkg/kubelet/pluginmanager/pluginwatcher, NewTestExamplePlugin), unmodified:
// N instances per round, all started at once in one registration directory.
// It reports each instance listening, each NotifyRegistrationStatus it gets,
// and when all of a round are registered (JSON lines, see internal/events).
//
// With --rounds R it runs R rounds one after the other, stopping each
// round's plugins (which removes their sockets) before the next starts; a
// benchmark uses rounds of one for single-plugin latency. After the last
// round the plugins keep serving until stdin closes or SIGTERM/SIGINT, then
// stop and report "stopped".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"nodeplugins/interop/internal/events"
)

func main() {
	klog.InitFlags(nil)
	dir := flag.String("dir", "", "the registration directory (plugins_registry) to serve in (required)")
	count := flag.Int("count", 1, "plugins per round, started at once")
	rounds := flag.Int("rounds", 1, "rounds, one after the other")
	pluginType := flag.String("type", "DRAPlugin", "the plugin type GetInfo reports")
	versions := flag.String("versions", "v1.DRAPlugin", "comma-separated supported versions GetInfo reports")
	prefix := flag.String("name-prefix", "example-plugin", "plugin names are PREFIX-ROUND-INDEX")
	timeout := flag.Duration("timeout", 60*time.Second, "how long a round may wait for its registrations")
	jitter := flag.Duration("jitter", 0, "between rounds, pause a random time up to this long before stopping the last round's plugins and again before starting the next, so rounds do not fall into step with a plugin manager that polls")
	flag.Parse()
	if *dir == "" || *count < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "example-plugins: --dir is required; --count and --rounds must be at least 1")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		// Closing stdin asks the program to stop.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	spec := fleetSpec{dir: *dir, pluginType: *pluginType, versions: strings.Split(*versions, ","), prefix: *prefix}
	var last *fleet
	for round := 0; round < *rounds; round++ {
		if last != nil {
			// Registered plugins are stopped after a pause, and the next
			// round starts after another: a plugin manager's answer to the
			// notification is in before the plugin goes, and neither the
			// stop nor the start falls into step with one that polls.
			pause(ctx, *jitter)
			last.stop(ctx)
			pause(ctx, *jitter)
		}
		f, err := startFleet(ctx, spec, round, *count)
		if err != nil {
			events.Emit("failed", events.Fields{"round": round, "error": err.Error()})
			os.Exit(1)
		}
		if err := f.waitRegistered(ctx, *timeout); err != nil {
			events.Emit("failed", events.Fields{"round": round, "error": err.Error()})
			f.stop(context.Background())
			os.Exit(1)
		}
		last = f
	}
	<-ctx.Done()
	last.stop(context.Background())
}

// pause waits a random time up to max, or until ctx ends.
func pause(ctx context.Context, max time.Duration) {
	if max <= 0 {
		return
	}
	select {
	case <-time.After(rand.N(max)):
	case <-ctx.Done():
	}
}

type fleetSpec struct {
	dir        string
	pluginType string
	versions   []string
	prefix     string
}

// fleet is one round's plugins.
type fleet struct {
	round      int
	plugins    []*instance
	registered sync.WaitGroup
}

func startFleet(ctx context.Context, spec fleetSpec, round, count int) (*fleet, error) {
	f := &fleet{round: round, plugins: make([]*instance, count)}
	f.registered.Add(count)
	errs := make(chan error, count)
	var started sync.WaitGroup
	for i := range count {
		name := fmt.Sprintf("%s-%d-%d", spec.prefix, round, i)
		socket := filepath.Join(spec.dir, name+".sock")
		p := newInstance(name, spec.pluginType, socket, spec.versions)
		f.plugins[i] = p
		started.Add(1)
		go func() {
			defer started.Done()
			if err := p.serve(ctx, round, i, &f.registered); err != nil {
				errs <- fmt.Errorf("plugin %s: %w", name, err)
			}
		}()
	}
	started.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return f, nil
}

// waitRegistered waits for every plugin of the round to be notified, then
// reports the round, or fails if any was told it is not registered.
func (f *fleet) waitRegistered(ctx context.Context, timeout time.Duration) error {
	done := make(chan struct{})
	go func() {
		f.registered.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("not every plugin was registered within %v", timeout)
	}
	first, last := f.plugins[0].listening, f.plugins[0].notified
	refused, firstError := 0, ""
	for _, p := range f.plugins {
		if p.refused != "" {
			if refused == 0 {
				firstError = p.refused
			}
			refused++
		}
		if p.listening.Before(first) {
			first = p.listening
		}
		if p.notified.After(last) {
			last = p.notified
		}
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d plugins were told they are not registered; the first error: %s", refused, len(f.plugins), firstError)
	}
	events.Emit("all_registered", events.Fields{
		"round":              f.round,
		"count":              len(f.plugins),
		"first_listening_ts": first.UnixNano(),
		"last_notified_ts":   last.UnixNano(),
		"span_ns":            last.Sub(first).Nanoseconds(),
	})
	return nil
}

func (f *fleet) stop(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range f.plugins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(ctx)
		}()
	}
	wg.Wait()
	events.Emit("stopped", events.Fields{"round": f.round, "count": len(f.plugins)})
}

// Command registration-probe measures what one plugin's registration server
// costs a client built on grpc-go, the kubelet's own gRPC stack: --count
// times, it opens a new connection to --socket, calls GetInfo twice on it
// and closes it. The first call includes the dial and the HTTP/2 handshake
// (grpc-go connects lazily); the second is a warm call on the same
// connection. Against an idle plugin the first figure is what any plugin
// manager on grpc-go pays per registration before its own work.
//
// It prints one "result" event (see internal/events) with the p50 and p90,
// in microseconds, of "first" (dial + first GetInfo) and "second" (the
// second GetInfo), and "n".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"nodeplugins/interop/internal/events"
)

func main() {
	socket := flag.String("socket", "", "the plugin's registration socket (required)")
	count := flag.Int("count", 200, "connections to open, one after the other")
	pause := flag.Duration("pause", 5*time.Millisecond, "idle time between connections, so each finds the plugin idle as a registration would")
	flag.Parse()
	if *socket == "" || *count < 1 {
		fmt.Fprintln(os.Stderr, "registration-probe: --socket is required; --count must be at least 1")
		os.Exit(2)
	}
	var first, second []time.Duration
	for range *count {
		f, s, err := probe(*socket)
		if err != nil {
			events.Emit("failed", events.Fields{"error": err.Error()})
			os.Exit(1)
		}
		first = append(first, f)
		second = append(second, s)
		time.Sleep(*pause)
	}
	events.Emit("result", events.Fields{
		"client": "grpc-go",
		"n":      *count,
		"first":  percentiles(first),
		"second": percentiles(second),
	})
}

// probe opens one connection, calls GetInfo twice and closes it, and
// returns how long the dial with the first call took and the second call.
func probe(socket string) (time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, 0, fmt.Errorf("dial %s: %w", socket, err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	if _, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		return 0, 0, fmt.Errorf("first GetInfo: %w", err)
	}
	firstDone := time.Now()
	if _, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		return 0, 0, fmt.Errorf("second GetInfo: %w", err)
	}
	return firstDone.Sub(start), time.Since(firstDone), nil
}

// percentiles are the p50 and p90 of samples, in microseconds.
func percentiles(samples []time.Duration) map[string]float64 {
	slices.Sort(samples)
	at := func(p float64) float64 {
		return float64(samples[int(float64(len(samples)-1)*p+0.5)].Nanoseconds()) / 1e3
	}
	return map[string]float64{"p50": at(0.5), "p90": at(0.9)}
}

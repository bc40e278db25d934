// Command etcd runs a single-member etcd for tests: the storage of the real
// kube-apiserver that the Rust tests start on loopback.
//
// Clients are served on a Unix socket, so parallel tests never race for a
// TCP port. When etcd is ready to serve, one event line goes to stdout:
//
//	{"event":"ready","ts":UNIX_NANOSECONDS,"client_url":"unix:///…","version":"3.x.y"}
//
// Logs go to stderr. SIGTERM or SIGINT closes etcd cleanly and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"

	"nodeplugins/interop/internal/events"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	socket := flag.String("client-socket", "", "Unix socket to serve clients on (required)")
	logLevel := flag.String("log-level", "warn", "log level on stderr: debug, info, warn or error")
	noFsync := flag.Bool("unsafe-no-fsync", false, "never fsync: faster, and a crash loses data")
	flag.Parse()
	if *dataDir == "" || *socket == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir and --client-socket are required")
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, *dataDir, *socket, *logLevel, *noFsync)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		os.Exit(1)
	}
}

// run serves until ctx is done (a clean stop) or etcd fails.
func run(ctx context.Context, dataDir, socket, logLevel string, noFsync bool) error {
	socket, err := filepath.Abs(socket)
	if err != nil {
		return fmt.Errorf("client socket path: %w", err)
	}
	clientURL := url.URL{Scheme: "unix", Path: socket}
	// A single member never dials its own peer URL, so any free port will do.
	peerURL := url.URL{Scheme: "http", Host: "127.0.0.1:0"}

	cfg := embed.NewConfig()
	cfg.Name = "nodeplugins-test"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = logLevel
	cfg.LogOutputs = []string{embed.StdErrLogOutput}
	cfg.UnsafeNoFsync = noFsync
	// A lone member elects itself after one election timeout; the default
	// (1 s) would be most of etcd's start-up. Nothing here waits on a network.
	cfg.TickMs = 10
	cfg.ElectionMs = 100

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()

	select {
	case <-e.Server.ReadyNotify():
	case <-e.Server.StopNotify():
		return errors.New("stopped before it was ready")
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return nil
	}
	events.Emit("ready", events.Fields{"client_url": clientURL.String(), "version": version.Version})

	select {
	case <-e.Server.StopNotify():
		return errors.New("stopped unexpectedly")
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return nil
	}
}

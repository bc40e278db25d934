// Command kubelet-plugins runs the kubelet's own node plugin machinery,
// unmodified, from the Kubernetes Go modules: the plugin manager
// (pkg/kubelet/pluginmanager) watching a registration directory, the DRA
// plugin manager (pkg/kubelet/cm/dra/plugin) as the DRAPlugin handler, a
// recording handler for CSIPlugin, and optionally the device-plugin
// registration server (pkg/kubelet/cm/devicemanager/plugin/v1beta1) on a
// kubelet.sock, also registered as the DevicePlugin handler.
//
// It prints what it observes as JSON lines (see internal/events) and takes
// requests on stdin (see internal/control): prepare and unprepare through the
// kubelet's DRA client; allocate, preferred and prestart through its
// device-plugin client. It stops on SIGTERM, SIGINT or when stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	dpserver "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
	"nodeplugins/interop/internal/recording"
)

func main() {
	klog.InitFlags(nil)
	registryDir := flag.String("registry-dir", "", "the plugins_registry directory to watch (required)")
	kubeletSock := flag.String("kubelet-sock", "", "serve the device-plugin registration server on this socket (optional)")
	nodeName := flag.String("node-name", "node-1", "the node this kubelet runs as")
	wipingDelay := flag.Duration("dra-wiping-delay", 30*time.Second, "how long a DRA driver may be away before its ResourceSlices are wiped")
	flag.Parse()
	if *registryDir == "" {
		fmt.Fprintln(os.Stderr, "kubelet-plugins: --registry-dir is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*registryDir, 0o750); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-plugins: create %s: %v\n", *registryDir, err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx)

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: *nodeName, UID: "node-uid-1"}}
	kubeClient := fake.NewClientset(node)
	getNode := func(context.Context) (*v1.Node, error) { return node, nil }
	draManager := draplugin.NewDRAPluginManager(ctx, kubeClient, getNode, healthRecorder{}, *wipingDelay)
	defer draManager.Stop()

	manager := pluginmanager.NewPluginManager(*registryDir, &record.FakeRecorder{})
	manager.AddHandler(registerapi.DRAPlugin, recording.Handler{Kind: registerapi.DRAPlugin, Inner: draManager})
	manager.AddHandler(registerapi.CSIPlugin, recording.Handler{Kind: registerapi.CSIPlugin, Inner: csiHandler{}})

	devices := newDevicePlugins()
	if *kubeletSock != "" {
		server, err := dpserver.NewServer(logger, *kubeletSock, socketCleaner{}, devices)
		if err == nil {
			err = server.Start(logger)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-plugins: device-plugin registration server on %s: %v\n", *kubeletSock, err)
			os.Exit(1)
		}
		defer func() { _ = server.Stop(logger) }()
		manager.AddHandler(registerapi.DevicePlugin, recording.Handler{Kind: registerapi.DevicePlugin, Inner: server})
	}

	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	go manager.Run(ctx, sourcesReady, ctx.Done())
	events.Emit("started", events.Fields{"registry_dir": *registryDir, "kubelet_sock": *kubeletSock, "pid": os.Getpid()})

	requests := &requestHandler{ctx: ctx, dra: draManager, devices: devices}
	go func() {
		control.Serve(os.Stdin, requests.handle)
		stop()
	}()
	<-ctx.Done()
	events.Emit("stopping", nil)
}

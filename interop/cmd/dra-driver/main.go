// Command dra-driver is a DRA driver written on the official Go helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin), as driver authors
// write one: fake GPUs gpu-0..gpu-N-1 in one pool named after the node, CDI
// ids "<driver>/gpu=<device>", device health reported as healthy.
//
// With --kubeconfig it talks to a real API server: it publishes its
// ResourceSlice and reads each ResourceClaim on prepare. Without one it runs
// on a fake clientset holding the claims given by --claims or added with
// {"op":"add_claim",...} on stdin, each allocated from this driver, so the
// helper's claim lookup runs unchanged either way.
//
// --instance gives the helper's rolling-update mode (a registration socket
// and DRA socket per instance, calls serialized by a file lock), so two
// instances can run side by side. It reports what happens as JSON lines (see
// internal/events) and stops on SIGTERM, SIGINT or when stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
)

func main() {
	klog.InitFlags(nil)
	driverName := flag.String("driver-name", "gpu.go.example.com", "the DRA driver name")
	nodeName := flag.String("node-name", "node-1", "the node this driver runs on")
	registryDir := flag.String("registry-dir", "", "the kubelet's plugins_registry directory (required)")
	pluginDir := flag.String("plugin-dir", "", "the driver's data directory, where its DRA socket lives (required)")
	instance := flag.String("instance", "", "rolling-update instance id (the pod UID); empty for a single instance")
	kubeconfig := flag.String("kubeconfig", "", "talk to this API server; without it, a fake clientset")
	claims := flag.String("claims", "", "fake clientset only: comma-separated NAMESPACE/NAME/UID claims, allocated one device each")
	deviceCount := flag.Int("devices", 4, "how many fake GPUs")
	v1 := flag.Bool("v1", true, "serve the v1 DRAPlugin service")
	v1beta1 := flag.Bool("v1beta1", true, "serve the v1beta1 DRAPlugin service")
	flag.Parse()
	if *registryDir == "" || *pluginDir == "" {
		fmt.Fprintln(os.Stderr, "dra-driver: --registry-dir and --plugin-dir are required")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	client, fakeClaims, err := kubeClient(*kubeconfig)
	if err != nil {
		fail("kubeconfig", err)
	}
	d := &driver{name: *driverName, pool: *nodeName, devices: *deviceCount, claims: fakeClaims}
	if fakeClaims != nil && *claims != "" {
		for _, c := range strings.Split(*claims, ",") {
			parts := strings.Split(c, "/")
			if len(parts) != 3 {
				fail("claims", fmt.Errorf("%q is not NAMESPACE/NAME/UID", c))
			}
			if err := d.addClaim(ctx, parts[0], parts[1], parts[2], nil); err != nil {
				fail("claims", err)
			}
		}
	}
	if err := os.MkdirAll(*pluginDir, 0o750); err != nil {
		fail("plugin-dir", err)
	}

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(*driverName),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(*registryDir),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.NodeV1(*v1),
		kubeletplugin.NodeV1beta1(*v1beta1),
		kubeletplugin.GRPCInterceptor(reportRegistration),
	}
	if *instance != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(*instance)))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		fail("start", err)
	}
	defer helper.Stop()
	registration := filepath.Join(*registryDir, *driverName+"-reg.sock")
	if *instance != "" {
		registration = kubeletplugin.RollingUpdateRegistrarSocketFile(*registryDir, *driverName, types.UID(*instance))
	}
	events.Emit("serving", events.Fields{"driver": *driverName, "instance": *instance, "registration_socket": registration})

	if *kubeconfig != "" {
		if err := helper.PublishResources(ctx, d.resources()); err != nil {
			fail("publish", err)
		}
		events.Emit("published", events.Fields{"pool": d.pool, "devices": d.devices})
	}

	go func() {
		control.Serve(os.Stdin, func(req control.Request) {
			if req.Op != "add_claim" || d.claims == nil {
				events.Emit("result", events.Fields{"id": req.ID, "op": req.Op, "error": "unknown op (add_claim needs the fake clientset)"})
				return
			}
			var args struct {
				Namespace string   `json:"namespace"`
				Name      string   `json:"name"`
				UID       string   `json:"uid"`
				Devices   []string `json:"devices"`
			}
			err := req.Decode(&args)
			if err == nil {
				err = d.addClaim(ctx, args.Namespace, args.Name, args.UID, args.Devices)
			}
			events.Emit("result", events.Fields{"id": req.ID, "op": req.Op, "error": events.ErrorString(err)})
		})
		stop()
	}()
	<-ctx.Done()
}

func fail(step string, err error) {
	events.Emit("failed", events.Fields{"step": step, "error": err.Error()})
	os.Exit(1)
}

// kubeClient connects to the API server of kubeconfig, or returns a fake
// clientset (also as the second result, for adding claims) without one.
func kubeClient(kubeconfig string) (kubernetes.Interface, *fake.Clientset, error) {
	if kubeconfig == "" {
		c := fake.NewClientset()
		return c, c, nil
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	return client, nil, err
}

// reportRegistration reports the NotifyRegistrationStatus the kubelet (or
// the agent) sends to the helper's registrar.
func reportRegistration(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if status, ok := req.(*registerapi.RegistrationStatus); ok {
		events.Emit("registration_status", events.Fields{"registered": status.PluginRegistered, "error": status.Error})
	}
	return handler(ctx, req)
}

// resources is the one pool this driver publishes.
func (d *driver) resources() resourceslice.DriverResources {
	slice := resourceslice.Slice{}
	for i := range d.devices {
		slice.Devices = append(slice.Devices, deviceOf(i))
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.pool: {Slices: []resourceslice.Slice{slice}}}}
}

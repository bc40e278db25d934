// Command kubelet-pods runs the kubelet's pod admission and release path for
// node plugins, driven by a real pod watch, with the kubelet's own code,
// unmodified, from the Kubernetes Go modules: the device manager
// (pkg/kubelet/cm/devicemanager) serving ROOT/device-plugins/kubelet.sock
// behind the topology manager's admit handler (pkg/kubelet/cm/topologymanager,
// policy none, as on a node without a topology policy), the DRA manager
// (pkg/kubelet/cm/dra), both plugin handlers and the CSI volume plugin's
// (pkg/volume/csi, which asks a driver for NodeGetInfo and writes it into
// the node's CSINode) under the kubelet's plugin manager
// (pkg/kubelet/pluginmanager) on ROOT/plugins_registry, and an
// informer on the pods bound to the node. It is the reference our agent's
// pod handling must equal, container by container.
//
// For each pod bound to the node that is not terminal and not being
// deleted, it does what the kubelet does before it starts the pod's
// containers: admission (the topology manager's Admit, which calls the
// device manager's Allocate for each init container and then each app
// container, in spec order), then the DRA manager's PrepareResources, then
// for each container the DRA manager's GetResources and the device
// manager's GetDeviceRunContainerOptions (which calls PreStartContainer
// where a plugin asks for it). When the pod is deleted, reaches phase
// Succeeded or Failed or gets a deletionTimestamp, it calls
// UnprepareResources and releases the pod's devices.
//
// Events (see internal/events), besides "result":
//
//	"started"        {root_dir, state_dir, node, kubelet_sock, registry_dir, pid}
//	                 once the managers run and the pod informer has synced
//	"registered"     {type, name, endpoint, versions, error} per plugin
//	                 registration through plugins_registry (type DRAPlugin,
//	                 DevicePlugin or CSIPlugin); "deregistered" {type, name, endpoint};
//	                 "validation_failed" {type, name, endpoint, versions, error}
//	"node_status"    {capacity, allocatable}: the device-plugin resources
//	                 patched into the node's status (quantities as strings)
//	"node_status_failed" {error}: once per distinct error; retried each second
//	"rejected"       {uid, namespace, name, reason, message}: admission failed,
//	                 e.g. reason "UnexpectedAdmissionError", message "Allocate
//	                 failed due to <err>, which is unexpected"; never retried
//	"prepare_failed" {uid, namespace, name, reason: "FailedPrepareDynamicResources",
//	                 message: "Failed to prepare dynamic resources: <err>"};
//	                 retried on the pod's next update or after 10 s
//	"start_failed"   {uid, namespace, name, container, reason:
//	                 "CreateContainerConfigError", message}: the container's
//	                 run options could not be made; retried as prepare_failed
//	"admitted"       {uid, namespace, name, seen_ns, containers}: ts is when
//	                 the pod's containers could be started, seen_ns when the
//	                 informer first saw the pod bound; containers as below
//	"unprepare_failed" {uid, namespace, name, error}: retried after 10 s
//	"released"       {uid, namespace, name}: unprepared and devices freed
//	"stopping"
//
// Each container of "admitted" (init containers first, then app
// containers, in spec order) is
//
//	{"name", "init": bool, "restartable": bool (a sidecar),
//	 "devices": {RESOURCE: [device id, ...]}, "numa": {RESOURCE: [NUMA id, ...]},
//	 "envs": {NAME: VALUE}, "mounts": [{"container_path", "host_path", "read_only"}],
//	 "device_specs": [{"container_path", "host_path", "permissions"}],
//	 "annotations": {KEY: VALUE}, "cdi_devices": [device-plugin CDI name, ...],
//	 "dra_cdi_devices": [CDI id from the DRA manager, ...]}
//
// Lists are sorted (device ids, NUMA ids, CDI names, mounts and device specs
// by container path): the kubelet merges them from Go maps, in no fixed
// order. Maps and lists are never null.
//
// Requests (see internal/control), each answered by a "result" event with
// the request's id, "op", "error" ("" when none), "response" and "took_ns":
//
//	{"op":"pods"}  response: the pods admitted and not yet released, sorted by
//	               namespace and name: [{uid, namespace, name, seen_ns,
//	               admitted_ns, containers}], containers as in "admitted"
//
// It writes nothing about pods to the API: a rejected pod stays Pending
// there (the kubelet would mark it Failed), so the scheduler keeps counting
// its requests until it is deleted. It neither registers nor reads the Node
// (the DRA manager reads it); it only patches the node's status. Pods
// already bound when it starts may be admitted before "started", which
// waits for the informer's first list. The device manager's checkpoint in
// ROOT/device-plugins names the resources of an earlier run: they show
// with capacity 0 until their plugins register again, as on a restarted
// kubelet.
//
// With --dra-reconcile (the default) the DRA manager's sources are ready,
// so its reconcile loop unprepares, every 60 s as upstream, the claims of
// pods that are no longer active. It stops on SIGTERM, SIGINT or when stdin
// closes.
//
// Usage: kubelet-pods --root-dir DIR --state-dir DIR [--node-name NAME]
// [--kubeconfig FILE] (else $KUBECONFIG; the node's identity,
// system:node:NAME) [--kube-api-qps 50] [--kube-api-burst 100]
// [--dra-reconcile=true]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
	"nodeplugins/interop/internal/kubeclient"
	"nodeplugins/interop/internal/recording"
)

func main() {
	klog.InitFlags(nil)
	rootDir := flag.String("root-dir", "", "the kubelet's root directory: plugins_registry and device-plugins/kubelet.sock go under it (required)")
	stateDir := flag.String("state-dir", "", "the DRA manager's state directory (required)")
	nodeName := flag.String("node-name", "node-1", "the node this kubelet runs as")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "the node identity's kubeconfig")
	apiQPS := flag.Float64("kube-api-qps", 50, "the client's rate limit, as the kubelet's kubeAPIQPS (negative: none)")
	apiBurst := flag.Int("kube-api-burst", 100, "the client's burst, as the kubelet's kubeAPIBurst")
	draReconcile := flag.Bool("dra-reconcile", true, "let the DRA manager's reconcile loop unprepare claims of inactive pods")
	flag.Parse()
	if *rootDir == "" || *stateDir == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "kubelet-pods: --root-dir, --state-dir and --kubeconfig (or KUBECONFIG) are required")
		os.Exit(2)
	}
	// The device manager wants an absolute socket path.
	root, err := filepath.Abs(*rootDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: --root-dir %s: %v\n", *rootDir, err)
		os.Exit(2)
	}
	registryDir := filepath.Join(root, "plugins_registry")
	kubeletSock := filepath.Join(root, "device-plugins", "kubelet.sock")
	for _, dir := range []string{registryDir, filepath.Dir(kubeletSock), *stateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-pods: create %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
	client, err := kubeclient.New(*kubeconfig, *apiQPS, *apiBurst)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: %v\n", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx)
	allReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })

	deviceManager, admitter, err := newDeviceManager(logger, kubeletSock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: device manager: %v\n", err)
		os.Exit(1)
	}
	draManager, err := dra.NewManager(logger, client, *stateDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: DRA manager: %v\n", err)
		os.Exit(1)
	}
	node := newNodeKubelet(ctx, deviceManager, admitter, draManager)

	// As the kubelet's container manager starts them: the DRA manager, then
	// the device manager, with the same active pods.
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, *nodeName, metav1.GetOptions{})
	}
	draSources := allReady
	if !*draReconcile {
		draSources = config.NewSourcesReady(func(sets.Set[string]) bool { return false })
	}
	if err := draManager.Start(ctx, dra.ActivePodsFunc(node.activePods), getNode, draSources); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: start the DRA manager: %v\n", err)
		os.Exit(1)
	}
	defer draManager.Stop()
	// No containers survive from an earlier run: the map and the running
	// set are empty, as after a node reboot.
	if err := deviceManager.Start(logger, devicemanager.ActivePodsFunc(node.activePods), allReady, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: start the device manager on %s: %v\n", kubeletSock, err)
		os.Exit(1)
	}
	defer func() { _ = deviceManager.Stop(logger) }()

	plugins := pluginmanager.NewPluginManager(registryDir, &record.FakeRecorder{})
	plugins.AddHandler(registerapi.DRAPlugin, recording.Handler{Kind: registerapi.DRAPlugin, Inner: draManager.GetWatcherHandler()})
	plugins.AddHandler(registerapi.DevicePlugin, recording.Handler{Kind: registerapi.DevicePlugin, Inner: deviceManager.GetWatcherHandler()})
	csiHandler, err := newCSIHandler(client, *nodeName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-pods: CSI volume plugin: %v\n", err)
		os.Exit(1)
	}
	plugins.AddHandler(registerapi.CSIPlugin, recording.Handler{Kind: registerapi.CSIPlugin, Inner: csiHandler})
	go plugins.Run(ctx, allReady, ctx.Done())

	go syncNodeStatus(ctx, client, *nodeName, deviceManager)

	// Requests are taken (and stdin's end noticed) while the informer syncs.
	requests := &requestHandler{node: node}
	go func() {
		control.Serve(os.Stdin, requests.handle)
		stop()
	}()

	go node.admitLoop()
	if err := watchPods(ctx, client, *nodeName, node); err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "kubelet-pods: pod informer: %v\n", err)
			os.Exit(1)
		}
	} else {
		events.Emit("started", events.Fields{
			"root_dir":     root,
			"state_dir":    *stateDir,
			"node":         *nodeName,
			"kubelet_sock": kubeletSock,
			"registry_dir": registryDir,
			"pid":          os.Getpid(),
		})
	}

	<-ctx.Done()
	events.Emit("stopping", nil)
}

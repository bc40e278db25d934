// Command kubelet-dra runs the kubelet's own DRA manager (pkg/kubelet/cm/dra),
// unmodified, from the Kubernetes Go modules: NewManager with a real
// clientset under the node's identity, its plugin handler under the
// kubelet's real plugin manager watching a registration directory, and
// pod-level PrepareResources, GetResources and UnprepareResources driven by
// requests on stdin. It is the reference our agent's `dra prepare --pod`
// must equal: for each container of a prepared pod it answers the CDI ids
// the kubelet would give the container runtime.
//
// Requests (see internal/control), each answered by a "result" event with
// the request's id, "error" ("" when none), "response" and "took_ns":
//
//	{"op":"prepare","namespace":NS,"name":NAME}
//	  GETs the pod, PrepareResources(pod), then GetResources for every
//	  container (init containers first); response:
//	  {"pod_uid": UID, "containers": {NAME: [CDI ID, ...]}}
//	{"op":"unprepare","namespace":NS,"name":NAME}
//	  UnprepareResources(pod) with the pod as prepared (GET if not known).
//	{"op":"health","namespace":NS,"name":NAME}
//	  UpdateAllocatedResourcesStatus for a prepared pod: the health the
//	  kubelet reports of each container's devices; response:
//	  {"containers": {NAME: [{"resource", "id", "health"}, ...]}}
//
// It prints "started" once the plugin manager runs, and "registered" and
// "deregistered" for each DRA driver. The manager's periodic reconcile
// never runs (its sources are never ready), so nothing is unprepared
// behind the test's back. It stops on SIGTERM, SIGINT or when stdin closes.
//
// Usage: kubelet-dra --registry-dir DIR --state-dir DIR [--node-name NAME]
// [--kubeconfig FILE] (else $KUBECONFIG) [--kube-api-qps 50]
// [--kube-api-burst 100] (the kubelet's defaults; a negative QPS: no limit)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
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
	registryDir := flag.String("registry-dir", "", "the plugins_registry directory to watch (required)")
	stateDir := flag.String("state-dir", "", "the DRA manager's state directory (required)")
	nodeName := flag.String("node-name", "node-1", "the node this kubelet runs as")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "the node identity's kubeconfig")
	apiQPS := flag.Float64("kube-api-qps", 50, "the client's rate limit, as the kubelet's kubeAPIQPS (negative: none)")
	apiBurst := flag.Int("kube-api-burst", 100, "the client's burst, as the kubelet's kubeAPIBurst")
	flag.Parse()
	if *registryDir == "" || *stateDir == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "kubelet-dra: --registry-dir, --state-dir and --kubeconfig (or KUBECONFIG) are required")
		os.Exit(2)
	}
	for _, dir := range []string{*registryDir, *stateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-dra: create %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
	client, err := kubeclient.New(*kubeconfig, *apiQPS, *apiBurst)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: %v\n", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx)

	manager, err := dra.NewManager(logger, client, *stateDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: DRA manager: %v\n", err)
		os.Exit(1)
	}
	pods := newPodCache()
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, *nodeName, metav1.GetOptions{})
	}
	neverReady := config.NewSourcesReady(func(sets.Set[string]) bool { return false })
	if err := manager.Start(ctx, pods.active, getNode, neverReady); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: start the DRA manager: %v\n", err)
		os.Exit(1)
	}
	defer manager.Stop()

	plugins := pluginmanager.NewPluginManager(*registryDir, &record.FakeRecorder{})
	plugins.AddHandler(registerapi.DRAPlugin, recording.Handler{Kind: registerapi.DRAPlugin, Inner: manager.GetWatcherHandler()})
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	go plugins.Run(ctx, ready, ctx.Done())
	events.Emit("started", events.Fields{"registry_dir": *registryDir, "state_dir": *stateDir, "node": *nodeName, "pid": os.Getpid()})

	requests := &requestHandler{ctx: ctx, client: client, manager: manager, pods: pods}
	go func() {
		control.Serve(os.Stdin, requests.handle)
		stop()
	}()
	<-ctx.Done()
	events.Emit("stopping", nil)
}

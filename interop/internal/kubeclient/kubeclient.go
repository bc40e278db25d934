// Package kubeclient builds the client a kubelet-like program talks to the
// API server with: from a kubeconfig file, rate-limited as the kubelet's
// client is (its kubeAPIQPS and kubeAPIBurst), not at client-go's own
// defaults (5 and 10), which would throttle a pod's claim reads far below a
// kubelet's.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// New is a clientset for the kubeconfig file at path, sending at most qps
// requests a second in bursts of burst (a negative qps: no limit).
func New(path string, qps float64, burst int) (*kubernetes.Clientset, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	restConfig.QPS = float32(qps)
	restConfig.Burst = burst
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return client, nil
}

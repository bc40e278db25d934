package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
)

// podCache holds the pods prepared and not yet unprepared, as the kubelet
// keeps the pods it runs: unprepare uses the pod as it was, even once the
// API has deleted it.
type podCache struct {
	mu   sync.Mutex
	pods map[string]*v1.Pod
}

func newPodCache() *podCache {
	return &podCache{pods: map[string]*v1.Pod{}}
}

func (c *podCache) get(key string) *v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[key]
}

func (c *podCache) put(key string, pod *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods[key] = pod
}

func (c *podCache) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, key)
}

// active is the DRA manager's ActivePodsFunc.
func (c *podCache) active() []*v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	pods := make([]*v1.Pod, 0, len(c.pods))
	for _, pod := range c.pods {
		pods = append(pods, pod)
	}
	return pods
}

// requestHandler carries out control requests through the DRA manager, one
// at a time in the order they come.
type requestHandler struct {
	ctx     context.Context
	client  kubernetes.Interface
	manager *dra.Manager
	pods    *podCache
}

type podRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

const callTimeout = 60 * time.Second

func (h *requestHandler) handle(req control.Request) {
	start := time.Now()
	var args podRequest
	var response any
	err := req.Decode(&args)
	if err == nil {
		ctx, cancel := context.WithTimeout(h.ctx, callTimeout)
		response, err = h.call(ctx, req.Op, args)
		cancel()
	} else {
		err = fmt.Errorf("bad request: %w", err)
	}
	events.Emit("result", events.Fields{
		"id":       req.ID,
		"op":       req.Op,
		"response": response,
		"error":    events.ErrorString(err),
		"took_ns":  time.Since(start).Nanoseconds(),
	})
}

func (h *requestHandler) call(ctx context.Context, op string, args podRequest) (any, error) {
	key := args.Namespace + "/" + args.Name
	switch op {
	case "prepare":
		pod, err := h.client.CoreV1().Pods(args.Namespace).Get(ctx, args.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		// Remembered first: a failed prepare is unprepared too, as the
		// kubelet does for a pod whose start failed.
		h.pods.put(key, pod)
		if err := h.manager.PrepareResources(ctx, pod); err != nil {
			return nil, err
		}
		containers := map[string][]string{}
		all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
		for i := range all {
			info, err := h.manager.GetResources(pod, &all[i])
			if err != nil {
				return nil, fmt.Errorf("container %s: %w", all[i].Name, err)
			}
			ids := []string{}
			for _, device := range info.CDIDevices {
				ids = append(ids, device.Name)
			}
			containers[all[i].Name] = ids
		}
		return map[string]any{"pod_uid": pod.UID, "containers": containers}, nil
	case "unprepare":
		pod := h.pods.get(key)
		if pod == nil {
			var err error
			pod, err = h.client.CoreV1().Pods(args.Namespace).Get(ctx, args.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
		}
		if err := h.manager.UnprepareResources(ctx, pod); err != nil {
			return nil, err
		}
		h.pods.remove(key)
		return map[string]any{"pod_uid": pod.UID}, nil
	case "health":
		pod := h.pods.get(key)
		if pod == nil {
			return nil, fmt.Errorf("pod %s is not prepared", key)
		}
		// The status the kubelet would report: each container's
		// allocatedResourcesStatus, from the DRA manager's health cache.
		status := &v1.PodStatus{}
		for _, c := range pod.Spec.Containers {
			status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
		}
		h.manager.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), pod, status)
		containers := map[string][]map[string]string{}
		for _, cs := range status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					containers[cs.Name] = append(containers[cs.Name], map[string]string{
						"resource": string(rs.Name), "id": string(r.ResourceID), "health": string(r.Health),
					})
				}
			}
		}
		return map[string]any{"containers": containers}, nil
	default:
		return nil, fmt.Errorf("unknown op %q", op)
	}
}

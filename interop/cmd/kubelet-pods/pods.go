package main

import (
	"context"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/kubernetes/pkg/kubelet/util/sliceutils"

	"nodeplugins/interop/internal/events"
)

// retryPeriod is how long a pod worker waits before it tries a failed
// prepare, container start or unprepare again when no update of the pod
// comes first: the kubelet's pod workers back off 10 s after a failed sync.
const retryPeriod = 10 * time.Second

// podPhase is where a pod is in this kubelet's handling.
type podPhase string

const (
	// Seen bound, waiting for admission in the sync loop.
	phaseAdmitting podPhase = "admitting"
	// Admitted by the device manager; its worker prepares its DRA claims
	// and makes its containers' run options.
	phaseStarting podPhase = "starting"
	// "admitted" emitted: its containers could run.
	phaseRunning podPhase = "running"
	// Termination requested after admission; unprepare pending.
	phaseTerminating podPhase = "terminating"
	// Refused at admission; never retried.
	phaseRejected podPhase = "rejected"
	// "released" emitted.
	phaseReleased podPhase = "released"
)

// podRecord is one pod this kubelet knows. Fields after the comment are
// guarded by nodeKubelet.mu.
type podRecord struct {
	uid  types.UID
	seen time.Time
	// wake tells the pod's worker that the pod changed.
	wake chan struct{}

	pod        *v1.Pod // the latest version seen, a private copy
	phase      podPhase
	stopping   bool // deleted, terminal or with a deletionTimestamp
	deleted    bool // gone from the API: forget it once done
	admittedAt time.Time
	containers []containerReport
}

// nodeKubelet is the kubelet's pod handling reduced to what node plugins
// see: a sync loop that admits pods one at a time, each batch oldest first
// (HandlePodAdditions), and a worker per admitted pod that starts and later
// terminates it (the pod workers).
type nodeKubelet struct {
	ctx      context.Context
	logger   klog.Logger
	devices  *devicemanager.ManagerImpl
	admitter lifecycle.PodAdmitHandler
	dra      *dra.Manager

	admissions chan *podRecord

	// deviceMu serializes the calls that can reach the device manager's
	// Allocate: its per-pod reuse bookkeeping has no lock of its own, the
	// kubelet relies on one admission at a time, and
	// GetDeviceRunContainerOptions re-allocates when it finds no devices
	// cached for a container. Only ordering changes, never results.
	deviceMu sync.Mutex

	mu   sync.Mutex
	pods map[types.UID]*podRecord
}

func newNodeKubelet(ctx context.Context, devices *devicemanager.ManagerImpl, admitter lifecycle.PodAdmitHandler, draManager *dra.Manager) *nodeKubelet {
	return &nodeKubelet{
		ctx:        ctx,
		logger:     klog.FromContext(ctx),
		devices:    devices,
		admitter:   admitter,
		dra:        draManager,
		admissions: make(chan *podRecord, 1<<14),
		pods:       map[types.UID]*podRecord{},
	}
}

// activePods is the managers' ActivePodsFunc, the kubelet's GetActivePods:
// the pods known and not refused, from the moment they are queued for
// admission (the kubelet adds a pod to its pod manager before it admits it,
// so the device manager never frees the devices of the pod it is admitting)
// until their release (the kubelet keeps a terminating pod active until its
// worker has stopped it and unprepared its claims).
func (n *nodeKubelet) activePods() []*v1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.activePodsLocked("")
}

func (n *nodeKubelet) activePodsLocked(except types.UID) []*v1.Pod {
	pods := make([]*v1.Pod, 0, len(n.pods))
	for uid, rec := range n.pods {
		switch rec.phase {
		case phaseAdmitting, phaseStarting, phaseRunning, phaseTerminating:
			if uid != except {
				pods = append(pods, rec.pod)
			}
		}
	}
	return pods
}

// observe takes one informer notification; gone is a deletion. It only
// records and hands on, so the informer's time of first sight is exact.
func (n *nodeKubelet) observe(pod *v1.Pod, gone bool) {
	now := time.Now()
	pod = pod.DeepCopy()
	stopping := gone || pod.DeletionTimestamp != nil || podutil.IsPodPhaseTerminal(pod.Status.Phase)
	n.mu.Lock()
	rec, known := n.pods[pod.UID]
	if !known {
		if stopping {
			// Never admitted here; the kubelet does not admit a pod that
			// is terminal or asked to stop.
			n.mu.Unlock()
			return
		}
		rec = &podRecord{uid: pod.UID, seen: now, wake: make(chan struct{}, 1), pod: pod, phase: phaseAdmitting}
		n.pods[pod.UID] = rec
		n.mu.Unlock()
		select {
		case n.admissions <- rec:
		case <-n.ctx.Done():
		}
		return
	}
	rec.pod = pod
	rec.stopping = rec.stopping || stopping
	rec.deleted = rec.deleted || gone
	switch rec.phase {
	case phaseRejected, phaseReleased:
		// Done with; kept so that later updates do not admit it again.
		if rec.deleted {
			delete(n.pods, rec.uid)
		}
	default:
		select {
		case rec.wake <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}

// admitLoop is the kubelet's sync loop for new pods: the pods seen since
// the last batch, sorted by creation time as HandlePodAdditions sorts them
// (sliceutils.PodsByCreationTime), admitted one at a time.
func (n *nodeKubelet) admitLoop() {
	for {
		var batch []*podRecord
		select {
		case <-n.ctx.Done():
			return
		case rec := <-n.admissions:
			batch = append(batch, rec)
		}
	more:
		for {
			select {
			case rec := <-n.admissions:
				batch = append(batch, rec)
			default:
				break more
			}
		}
		n.mu.Lock()
		pods := make([]*v1.Pod, len(batch))
		byUID := make(map[types.UID]*podRecord, len(batch))
		for i, rec := range batch {
			pods[i] = rec.pod
			byUID[rec.uid] = rec
		}
		n.mu.Unlock()
		sort.Sort(sliceutils.PodsByCreationTime(pods))
		for _, pod := range pods {
			n.admit(byUID[pod.UID])
		}
	}
}

func (n *nodeKubelet) admit(rec *podRecord) {
	n.mu.Lock()
	if rec.stopping {
		// Asked to stop before it was admitted: the kubelet skips admission
		// and nothing was allocated or prepared for it.
		delete(n.pods, rec.uid)
		n.mu.Unlock()
		return
	}
	pod := rec.pod
	others := n.activePodsLocked(rec.uid)
	n.mu.Unlock()

	n.deviceMu.Lock()
	result := n.admitter.Admit(n.ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others, Operation: lifecycle.AddOperation})
	n.deviceMu.Unlock()
	if !result.Admit {
		// The kubelet marks the pod Failed with this reason and message
		// and never starts it. Devices allocated to its first containers
		// stay in the device manager's books until its next allocation,
		// which frees what inactive pods hold.
		n.mu.Lock()
		rec.phase = phaseRejected
		if rec.deleted {
			delete(n.pods, rec.uid)
		}
		n.mu.Unlock()
		events.Emit("rejected", podFields(pod, events.Fields{"reason": result.Reason, "message": result.Message}))
		return
	}
	n.mu.Lock()
	rec.phase = phaseStarting
	n.mu.Unlock()
	go n.work(rec)
}

// work is the pod's worker: it starts the pod until that succeeds, then
// waits for its termination and carries it out.
func (n *nodeKubelet) work(rec *podRecord) {
	retry := time.NewTimer(retryPeriod)
	retry.Stop()
	defer retry.Stop()
	for {
		n.mu.Lock()
		stopping, phase, pod := rec.stopping, rec.phase, rec.pod
		n.mu.Unlock()
		if stopping {
			n.terminate(rec)
			return
		}
		if phase == phaseStarting && !n.start(rec, pod) {
			retry.Reset(retryPeriod)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-rec.wake:
		case <-retry.C:
		}
	}
}

// start does what the kubelet's SyncPod does for node plugins before the
// sandbox and the containers: prepare the pod's DRA claims, then make
// each container's run options. It reports whether the pod is running.
func (n *nodeKubelet) start(rec *podRecord, pod *v1.Pod) bool {
	if err := n.dra.PrepareResources(n.ctx, pod); err != nil {
		if n.ctx.Err() == nil {
			events.Emit("prepare_failed", podFields(pod, events.Fields{
				"reason":  "FailedPrepareDynamicResources",
				"message": "Failed to prepare dynamic resources: " + err.Error(),
			}))
		}
		return false
	}
	containers, failed, err := n.describeContainers(n.ctx, pod)
	if err != nil {
		if n.ctx.Err() == nil {
			events.Emit("start_failed", podFields(pod, events.Fields{
				"container": failed,
				"reason":    "CreateContainerConfigError",
				"message":   err.Error(),
			}))
		}
		return false
	}
	now := time.Now()
	n.mu.Lock()
	rec.phase = phaseRunning
	rec.admittedAt = now
	rec.containers = containers
	seen := rec.seen
	n.mu.Unlock()
	events.EmitAt("admitted", now, podFields(pod, events.Fields{"seen_ns": seen.UnixNano(), "containers": containers}))
	return true
}

// terminate is the kubelet's SyncTerminatingPod for node plugins: once the
// containers are stopped, the claims are unprepared (retried until it
// works), then the pod stops being active.
func (n *nodeKubelet) terminate(rec *podRecord) {
	n.mu.Lock()
	rec.phase = phaseTerminating
	n.mu.Unlock()
	retry := time.NewTimer(retryPeriod)
	retry.Stop()
	defer retry.Stop()
	for {
		n.mu.Lock()
		pod := rec.pod
		n.mu.Unlock()
		err := n.dra.UnprepareResources(n.ctx, pod)
		if err == nil {
			break
		}
		if n.ctx.Err() != nil {
			return
		}
		events.Emit("unprepare_failed", podFields(pod, events.Fields{"error": err.Error()}))
		retry.Reset(retryPeriod)
		select {
		case <-n.ctx.Done():
			return
		case <-retry.C:
		}
	}
	n.mu.Lock()
	rec.phase = phaseReleased
	rec.containers = nil
	if rec.deleted {
		delete(n.pods, rec.uid)
	}
	pod := rec.pod
	n.mu.Unlock()
	// The kubelet frees a finished pod's devices lazily: the next Allocate
	// (or a pod-resources List, which calls this too) drops the devices of
	// pods no longer active. Done here at once so the device manager's
	// books (and its checkpoint, at its next write) never show devices of
	// a released pod. Node status does not depend on it: capacity and
	// allocatable count registered devices, allocated or not.
	n.devices.UpdateAllocatedDevices(n.logger)
	events.Emit("released", podFields(pod, nil))
}

// admittedPod is one entry of the "pods" request's answer.
type admittedPod struct {
	UID        types.UID         `json:"uid"`
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	SeenNs     int64             `json:"seen_ns"`
	AdmittedNs int64             `json:"admitted_ns"`
	Containers []containerReport `json:"containers"`
}

// admitted lists the pods whose "admitted" was emitted and whose
// "released" was not yet, sorted by namespace and name.
func (n *nodeKubelet) admitted() []admittedPod {
	n.mu.Lock()
	pods := []admittedPod{}
	for _, rec := range n.pods {
		if rec.admittedAt.IsZero() || rec.phase == phaseReleased {
			continue
		}
		pods = append(pods, admittedPod{
			UID:        rec.uid,
			Namespace:  rec.pod.Namespace,
			Name:       rec.pod.Name,
			SeenNs:     rec.seen.UnixNano(),
			AdmittedNs: rec.admittedAt.UnixNano(),
			Containers: rec.containers,
		})
	}
	n.mu.Unlock()
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}

// podFields are the fields naming a pod in an event, with extra ones.
func podFields(pod *v1.Pod, extra events.Fields) events.Fields {
	fields := events.Fields{"uid": pod.UID, "namespace": pod.Namespace, "name": pod.Name}
	for k, v := range extra {
		fields[k] = v
	}
	return fields
}

package main

import (
	"fmt"
	_ "unsafe" // for go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// newManagerImpl is the device manager's own constructor, the one its
// exported NewManagerImpl calls with the fixed path
// /var/lib/kubelet/device-plugins/kubelet.sock; the kubelet's tests call it
// with a socket of their own, as we do. Pulled by linkname: the package is
// not part of the standard library, so the linker allows it, and the
// signature is checked by nothing but this declaration, which must match
// pkg/kubelet/cm/devicemanager/manager.go of the pinned Kubernetes version.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// newDeviceManager makes the kubelet's device manager serving socketPath
// (its checkpoint goes next to it) and the topology manager it sits behind,
// as the kubelet's container manager wires them on a node without a
// topology policy: policy none (so the scope is "none" and no NUMA
// topology is needed), the device manager its hint provider and reading its
// affinities from it. The topology manager is the kubelet's admit handler
// for pod resources: its Admit calls the device manager's Allocate for each
// init container and then each app container, in spec order, and turns an
// error into the kubelet's rejection (admission.GetPodAdmitResult).
func newDeviceManager(logger klog.Logger, socketPath string) (*devicemanager.ManagerImpl, lifecycle.PodAdmitHandler, error) {
	topology, err := topologymanager.NewManager(logger, nil, topologymanager.PolicyNone, topologymanager.ContainerTopologyScope, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("topology manager: %w", err)
	}
	manager, err := newManagerImpl(logger, socketPath, nil, topology)
	if err != nil {
		return nil, nil, err
	}
	topology.AddHintProvider(logger, manager)
	return manager, topology, nil
}

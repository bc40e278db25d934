package main

import (
	"context"
	"errors"
	"sort"

	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// containerReport is what the kubelet hands the container runtime for one
// container from node plugins, as in the "admitted" event.
type containerReport struct {
	Name          string              `json:"name"`
	Init          bool                `json:"init"`
	Restartable   bool                `json:"restartable"`
	Devices       map[string][]string `json:"devices"`
	NUMA          map[string][]int64  `json:"numa"`
	Envs          map[string]string   `json:"envs"`
	Mounts        []mountReport       `json:"mounts"`
	DeviceSpecs   []deviceSpecReport  `json:"device_specs"`
	Annotations   map[string]string   `json:"annotations"`
	CDIDevices    []string            `json:"cdi_devices"`
	DRACDIDevices []string            `json:"dra_cdi_devices"`
}

type mountReport struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	ReadOnly      bool   `json:"read_only"`
}

type deviceSpecReport struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	Permissions   string `json:"permissions"`
}

// describeContainers makes the run options of every container of pod, init
// containers first, in spec order, as the kubelet does when it starts them
// (it starts app containers only once the init containers are done; here
// nothing runs, so all are made at once). On error it names the container.
func (n *nodeKubelet) describeContainers(ctx context.Context, pod *v1.Pod) ([]containerReport, string, error) {
	reports := make([]containerReport, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		container := &pod.Spec.InitContainers[i]
		report, err := n.describeContainer(ctx, pod, container, true)
		if err != nil {
			return nil, container.Name, err
		}
		reports = append(reports, report)
	}
	for i := range pod.Spec.Containers {
		container := &pod.Spec.Containers[i]
		report, err := n.describeContainer(ctx, pod, container, false)
		if err != nil {
			return nil, container.Name, err
		}
		reports = append(reports, report)
	}
	return reports, "", nil
}

// describeContainer follows the kubelet's container manager GetResources:
// the DRA manager's CDI ids first, then the device manager's run options
// (PreStartContainer included); then the device ids it allocated.
func (n *nodeKubelet) describeContainer(ctx context.Context, pod *v1.Pod, container *v1.Container, init bool) (containerReport, error) {
	report := containerReport{
		Name:          container.Name,
		Init:          init,
		Restartable:   init && podutil.IsRestartableInitContainer(container),
		Devices:       map[string][]string{},
		NUMA:          map[string][]int64{},
		Envs:          map[string]string{},
		Mounts:        []mountReport{},
		DeviceSpecs:   []deviceSpecReport{},
		Annotations:   map[string]string{},
		CDIDevices:    []string{},
		DRACDIDevices: []string{},
	}
	info, err := n.dra.GetResources(pod, container)
	if err != nil {
		return report, runtimeMessage(err)
	}
	for _, device := range info.CDIDevices {
		report.DRACDIDevices = append(report.DRACDIDevices, device.Name)
	}
	sort.Strings(report.DRACDIDevices)

	n.deviceMu.Lock()
	options, err := n.devices.GetDeviceRunContainerOptions(ctx, pod, container)
	n.deviceMu.Unlock()
	if err != nil {
		return report, runtimeMessage(err)
	}
	if options != nil {
		for _, env := range options.Envs {
			report.Envs[env.Name] = env.Value
		}
		for _, mount := range options.Mounts {
			report.Mounts = append(report.Mounts, mountReport{ContainerPath: mount.ContainerPath, HostPath: mount.HostPath, ReadOnly: mount.ReadOnly})
		}
		sort.Slice(report.Mounts, func(i, j int) bool { return report.Mounts[i].ContainerPath < report.Mounts[j].ContainerPath })
		for _, device := range options.Devices {
			report.DeviceSpecs = append(report.DeviceSpecs, deviceSpecReport{ContainerPath: device.PathInContainer, HostPath: device.PathOnHost, Permissions: device.Permissions})
		}
		sort.Slice(report.DeviceSpecs, func(i, j int) bool {
			return report.DeviceSpecs[i].ContainerPath < report.DeviceSpecs[j].ContainerPath
		})
		for _, annotation := range options.Annotations {
			report.Annotations[annotation.Name] = annotation.Value
		}
		for _, device := range options.CDIDevices {
			report.CDIDevices = append(report.CDIDevices, device.Name)
		}
		sort.Strings(report.CDIDevices)
	}

	for resource, instances := range n.devices.GetDevices(string(pod.UID), container.Name) {
		ids := make([]string, 0, len(instances))
		numa := map[int64]bool{}
		for id, device := range instances {
			ids = append(ids, id)
			for _, node := range device.GetTopology().GetNodes() {
				numa[node.GetID()] = true
			}
		}
		sort.Strings(ids)
		nodes := make([]int64, 0, len(numa))
		for node := range numa {
			nodes = append(nodes, node)
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
		report.Devices[resource] = ids
		report.NUMA[resource] = nodes
	}
	return report, nil
}

// runtimeMessage is the text the kubelet reports for a container whose
// run options failed: the gRPC status message (the error's text when it is
// not a gRPC status).
func runtimeMessage(err error) error {
	status, _ := grpcstatus.FromError(err)
	return errors.New(status.Message())
}

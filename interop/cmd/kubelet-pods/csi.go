package main

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	storagelistersv1 "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/kubernetes/pkg/volume/csi"
)

// csiHost is what the CSI volume plugin uses of the kubelet's volume host
// when it starts and registers drivers: the node's API client and name
// (its node info manager initializes the node's CSINode at start, as on a
// kubelet, and writes each driver into it and into the node's annotation).
// It is a kubelet's host, with no CSIDriver informer and no service account
// tokens (mounting volumes needs those, registering does not). Any other
// method of the embedded, nil hosts panics; neither path calls one.
type csiHost struct {
	volume.VolumeHost
	volume.KubeletVolumeHost
	client clientset.Interface
	node   types.NodeName
}

func (h csiHost) GetKubeClient() clientset.Interface { return h.client }

func (h csiHost) GetNodeName() types.NodeName { return h.node }

func (h csiHost) GetInformerFactory() informers.SharedInformerFactory { return nil }

func (h csiHost) CSIDriverLister() storagelistersv1.CSIDriverLister { return nil }

func (h csiHost) GetServiceAccountTokenFunc() func(namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return nil
}

// SetKubeletError is where the plugin says the node is not ready until its
// CSINode is initialized.
func (h csiHost) SetKubeletError(err error) {
	if err != nil {
		klog.InfoS("CSI volume plugin", "notReady", err)
	}
}

// newCSIHandler initializes the kubelet's own CSI volume plugin for node
// `node` and returns its plugin watcher handler (pkg/volume/csi
// RegistrationHandler): ValidatePlugin checks the versions, RegisterPlugin
// calls the driver's NodeGetInfo and records the driver in the node's
// CSINode.
func newCSIHandler(client clientset.Interface, node string) (cache.PluginHandler, error) {
	plugin := csi.ProbeVolumePlugins()[0]
	if err := plugin.Init(csiHost{client: client, node: types.NodeName(node)}); err != nil {
		return nil, err
	}
	return csi.PluginHandler, nil
}

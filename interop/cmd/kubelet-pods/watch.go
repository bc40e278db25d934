package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watchPods runs an informer on the pods bound to nodeName, as the
// kubelet's API pod source lists and watches them (a field selector on
// spec.nodeName, which is also all a node identity may list), feeding
// every notification to node. It returns once the informer has synced.
func watchPods(ctx context.Context, client kubernetes.Interface, nodeName string, node *nodeKubelet) error {
	selector := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(options *metav1.ListOptions) { options.FieldSelector = selector }))
	informer := factory.Core().V1().Pods().Informer()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				node.observe(pod, false)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				node.observe(pod, false)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				node.observe(pod, true)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("%v informer did not sync", typ)
		}
	}
	return nil
}

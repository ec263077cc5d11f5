package usage

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodePods follows the pods bound to one node through an informer (a
// field selector on spec.nodeName, as the kubelet's own watch), so that a
// round reads the pods' claims from memory: the API server sees one watch
// per node, not a list every round.
type NodePods struct {
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
}

const byUID = "uid"

// NewNodePods builds the informer of node's pods; Start runs it.
func NewNodePods(client kubernetes.Interface, node string) (*NodePods, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	informer := factory.Core().V1().Pods().Informer()
	if err := informer.AddIndexers(cache.Indexers{byUID: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		return []string{string(pod.UID)}, nil
	}}); err != nil {
		return nil, err
	}
	return &NodePods{factory: factory, informer: informer}, nil
}

// Start runs the informer until ctx ends. It does not wait for the first
// list: rounds fail until it is there (Claims).
func (p *NodePods) Start(ctx context.Context) { p.factory.Start(ctx.Done()) }

// Claims returns the claims of the node's pods (ClaimsOfPods).
func (p *NodePods) Claims(context.Context) (map[string][]string, error) {
	if !p.informer.HasSynced() {
		return nil, errors.New("the node's pods are not listed yet")
	}
	var pods []*corev1.Pod
	for _, obj := range p.informer.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return ClaimsOfPods(pods), nil
}

// Pod returns the node's pod of a UID.
func (p *NodePods) Pod(uid string) (*corev1.Pod, bool) {
	objs, err := p.informer.GetIndexer().ByIndex(byUID, uid)
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	pod, ok := objs[0].(*corev1.Pod)
	return pod, ok
}

// UID returns the UID of the node's pod namespace/name.
func (p *NodePods) UID(namespace, name string) (string, bool) {
	obj, ok, err := p.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return "", false
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return "", false
	}
	return string(pod.UID), true
}

// Siblings returns the UIDs of the node's pods in the namespace of pod uid
// that carry its value of label key: with uid the plugin's own pod and key
// its component label, the plugin's pods of the node, the old one beside
// the new during a rolling update. Only uid when its pod is not known or
// has no such label.
func (p *NodePods) Siblings(uid, key string) []string {
	own, ok := p.Pod(uid)
	value, labelled := "", false
	if ok {
		value, labelled = own.Labels[key]
	}
	if !labelled {
		return []string{uid}
	}
	var out []string
	for _, obj := range p.informer.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Namespace == own.Namespace && pod.Labels[key] == value {
			out = append(out, string(pod.UID))
		}
	}
	return out
}

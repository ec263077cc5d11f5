package gang

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

// GangClient reads GpuGangs (from a cache) and writes their status. The
// controller uses the dynamic client rather than a generated clientset:
// one CRD with two calls does not justify generated code.
type GangClient interface {
	Get(namespace, name string) (*tangramv1.GpuGang, error)
	UpdateStatus(ctx context.Context, g *tangramv1.GpuGang) error
}

// DynamicGangs is a GangClient over a dynamic informer's lister and a
// dynamic client.
type DynamicGangs struct {
	Lister cache.GenericLister
	Client dynamic.Interface
}

// Get returns a copy of the cached gang, or a NotFound error.
func (d DynamicGangs) Get(namespace, name string) (*tangramv1.GpuGang, error) {
	obj, err := d.Lister.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	return FromObject(obj)
}

// List returns copies of every cached gang (for the gang metrics).
func (d DynamicGangs) List() ([]*tangramv1.GpuGang, error) {
	objs, err := d.Lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing GpuGangs from the cache: %w", err)
	}
	gangs := make([]*tangramv1.GpuGang, 0, len(objs))
	for _, obj := range objs {
		g, err := FromObject(obj)
		if err != nil {
			return nil, err
		}
		gangs = append(gangs, g)
	}
	return gangs, nil
}

// UpdateStatus writes the status subresource; a conflict means the cache
// was stale and the gang is reconciled again.
func (d DynamicGangs) UpdateStatus(ctx context.Context, g *tangramv1.GpuGang) error {
	u, err := ToUnstructured(g)
	if err != nil {
		return err
	}
	_, err = d.Client.Resource(tangramv1.GroupVersionResource).Namespace(g.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating the status of GpuGang %s/%s: %w", g.Namespace, g.Name, err)
	}
	return nil
}

// FromObject converts what a dynamic informer holds into a GpuGang.
func FromObject(obj runtime.Object) (*tangramv1.GpuGang, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("expected an unstructured GpuGang, got %T", obj)
	}
	g := &tangramv1.GpuGang{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), g); err != nil {
		return nil, fmt.Errorf("decoding GpuGang %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return g, nil
}

// ToUnstructured converts a GpuGang for the dynamic client.
func ToUnstructured(g *tangramv1.GpuGang) (*unstructured.Unstructured, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
	if err != nil {
		return nil, fmt.Errorf("encoding GpuGang %s/%s: %w", g.Namespace, g.Name, err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(tangramv1.GroupVersionKind)
	return u, nil
}

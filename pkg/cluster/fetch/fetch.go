// Package fetch reads the objects the cluster view needs from the API
// server, read-only, with the permissions docs/kubectl-tangram.md lists.
package fetch

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster"
)

// pageSize bounds each list call so a large cluster is read in pages.
const pageSize = 500

// What says which optional object kinds to read besides slices, claims and
// classes.
type What struct {
	// Nodes are needed for node labels (topology); when listing them is
	// forbidden the snapshot goes on without them.
	Nodes bool
}

// Snapshot lists ResourceSlices, ResourceClaims in all namespaces,
// DeviceClasses and, if asked, Nodes.
func Snapshot(ctx context.Context, client kubernetes.Interface, what What) (*cluster.Snapshot, error) {
	snap := &cluster.Snapshot{}
	err := list(ctx, "resourceslices", func(opts metav1.ListOptions) (string, error) {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			snap.Slices = append(snap.Slices, &l.Items[i])
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	err = list(ctx, "resourceclaims", func(opts metav1.ListOptions) (string, error) {
		l, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			snap.Claims = append(snap.Claims, &l.Items[i])
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	err = list(ctx, "deviceclasses", func(opts metav1.ListOptions) (string, error) {
		l, err := client.ResourceV1().DeviceClasses().List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			snap.Classes = append(snap.Classes, &l.Items[i])
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	if what.Nodes {
		err = list(ctx, "nodes", func(opts metav1.ListOptions) (string, error) {
			l, err := client.CoreV1().Nodes().List(ctx, opts)
			if err != nil {
				return "", err
			}
			for i := range l.Items {
				snap.Nodes = append(snap.Nodes, &l.Items[i])
			}
			return l.Continue, nil
		})
		if apierrors.IsForbidden(err) {
			// Node labels only refine topology; slices still name the nodes.
			klog.FromContext(ctx).V(1).Info("Listing nodes is forbidden; going on without node labels", "err", err)
			snap.Nodes = nil
			err = nil
		}
		if err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// list pages through one kind; page returns the continue token.
func list(ctx context.Context, kind string, page func(metav1.ListOptions) (string, error)) error {
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		next, err := page(opts)
		if err != nil {
			return fmt.Errorf("listing %s: %w%s", kind, err, hint(err, kind))
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
		if ctx.Err() != nil {
			return fmt.Errorf("listing %s: %w", kind, ctx.Err())
		}
	}
}

// Gangs lists the GpuGangs in all namespaces. A cluster without the CRD,
// or a user who may not read GpuGangs, gets none: gangs add to the view but
// are not needed for it.
func Gangs(ctx context.Context, client dynamic.Interface) ([]*tangramv1alpha1.GpuGang, error) {
	var gangs []*tangramv1alpha1.GpuGang
	err := list(ctx, tangramv1alpha1.Resource, func(opts metav1.ListOptions) (string, error) {
		l, err := client.Resource(tangramv1alpha1.GroupVersionResource).Namespace(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			g := &tangramv1alpha1.GpuGang{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, g); err != nil {
				return "", fmt.Errorf("decoding GpuGang %s/%s: %w", l.Items[i].GetNamespace(), l.Items[i].GetName(), err)
			}
			gangs = append(gangs, g)
		}
		return l.GetContinue(), nil
	})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		klog.FromContext(ctx).V(1).Info("Not showing GpuGangs", "reason", err)
		return nil, nil
	}
	return gangs, err
}

// Pod reads one pod.
func Pod(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Pod, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w%s", namespace, name, err, hint(err, "pods"))
	}
	return pod, nil
}

// FindClaim returns a claim of the snapshot by name, or a NotFound-style
// error naming the namespace.
func FindClaim(snap *cluster.Snapshot, namespace, name string) (*resourceapi.ResourceClaim, error) {
	for _, c := range snap.Claims {
		if c.Namespace == namespace && c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("resourceclaim %q not found in namespace %q (use -n to pick the namespace)", name, namespace)
}

// hint adds what to do about the usual errors.
func hint(err error, kind string) string {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("; your user may not read %s: bind the read-only ClusterRole from docs/kubectl-tangram.md", kind)
	case apierrors.IsNotFound(err) && kind != "pods":
		return "; does the cluster serve resource.k8s.io/v1 (Kubernetes 1.34 or later)?"
	}
	return ""
}

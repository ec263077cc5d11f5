package fetch

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

func TestListPages(t *testing.T) {
	var seen []string
	pages := map[string]string{"": "p2", "p2": "p3", "p3": ""}
	err := list(context.Background(), "things", func(opts metav1.ListOptions) (string, error) {
		if opts.Limit != pageSize {
			t.Errorf("limit %d, want %d", opts.Limit, pageSize)
		}
		seen = append(seen, opts.Continue)
		return pages[opts.Continue], nil
	})
	if err != nil || strings.Join(seen, ",") != ",p2,p3" {
		t.Errorf("pages %q, err %v", seen, err)
	}
	err = list(context.Background(), "things", func(metav1.ListOptions) (string, error) { return "", errors.New("boom") })
	if err == nil || err.Error() != "listing things: boom" {
		t.Errorf("got %v", err)
	}
}

func TestSnapshot(t *testing.T) {
	client := fake.NewClientset(
		&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "c1"}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "c2"}},
		&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.tangram.dev"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
	)
	snap, err := Snapshot(context.Background(), client, What{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Slices) != 1 || len(snap.Claims) != 2 || len(snap.Classes) != 1 || len(snap.Nodes) != 0 {
		t.Errorf("without nodes: %d slices %d claims %d classes %d nodes", len(snap.Slices), len(snap.Claims), len(snap.Classes), len(snap.Nodes))
	}
	snap, err = Snapshot(context.Background(), client, What{Nodes: true})
	if err != nil || len(snap.Nodes) != 1 {
		t.Fatalf("with nodes: %v, %d nodes", err, len(snap.Nodes))
	}
	if _, err := FindClaim(snap, "b", "c2"); err != nil {
		t.Error(err)
	}
	if _, err := FindClaim(snap, "a", "c2"); err == nil || !strings.Contains(err.Error(), `not found in namespace "a"`) {
		t.Errorf("got %v", err)
	}

	client.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(resourceapi.Resource("resourceslices"), "")
	})
	_, err = Snapshot(context.Background(), client, What{})
	if err == nil || !strings.Contains(err.Error(), "does the cluster serve resource.k8s.io/v1") {
		t.Errorf("got %v", err)
	}
}

func TestGangs(t *testing.T) {
	gang := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tangram.dev/v1alpha1", "kind": "GpuGang",
		"metadata": map[string]any{"namespace": "ml", "name": "g"},
		"spec":     map[string]any{"members": map[string]any{"count": int64(3)}},
		"status":   map[string]any{"phase": "Pending", "diagnosis": "no room"},
	}}
	listKinds := map[schema.GroupVersionResource]string{tangramv1alpha1.GroupVersionResource: "GpuGangList"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, gang)
	gangs, err := Gangs(context.Background(), dyn)
	if err != nil || len(gangs) != 1 || gangs[0].Spec.Members.Count != 3 || gangs[0].Status.Diagnosis != "no room" {
		t.Fatalf("got %+v, %v", gangs, err)
	}

	// No CRD installed, or not allowed to read: no gangs, no error.
	for _, fail := range []error{
		apierrors.NewNotFound(tangramv1alpha1.SchemeGroupVersion.WithResource("gpugangs").GroupResource(), ""),
		apierrors.NewForbidden(tangramv1alpha1.SchemeGroupVersion.WithResource("gpugangs").GroupResource(), "", nil),
	} {
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
		dyn.PrependReactor("list", "gpugangs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, fail })
		if gangs, err := Gangs(context.Background(), dyn); err != nil || gangs != nil {
			t.Errorf("%v: got %v, %v", fail, gangs, err)
		}
	}
	dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
	dyn.PrependReactor("list", "gpugangs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := Gangs(context.Background(), dyn); err == nil {
		t.Error("a connection error was swallowed")
	}
}

package gang

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
)

func TestEventMapping(t *testing.T) {
	g := newGang("train", 2, 1, false, "")
	labelled := DesiredTemplate(g)
	tests := []struct {
		name string
		key  func(any) (cache.ObjectName, bool)
		obj  any
		want string
	}{
		{"member pod", podGang, memberPod(g, "m-0", "", corev1.PodPending, ""), "team/train"},
		{"deleted member pod", podGang, cache.DeletedFinalStateUnknown{Obj: memberPod(g, "m-0", "", corev1.PodPending, "")}, "team/train"},
		{"pod without group", podGang, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "x"}}, ""},
		{"owned object", labelledGang, labelled, "team/train"},
		{"claim made from the template", labelledGang, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Labels: labelled.Spec.ObjectMeta.Labels}}, "team/train"},
		{"unlabelled object", labelledGang, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, ok := tc.key(tc.obj)
			got := ""
			if ok {
				got = key.String()
			}
			if got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
}

// TestControllerRun drives the real informers and queue: creating a gang
// leads to its PodGroup and status, a member pod event updates the status.
func TestControllerRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube := fake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{tangramv1.GroupVersionResource: "GpuGangList"})
	factory := informers.NewSharedInformerFactory(kube, 0)
	gangFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	c, err := NewController(kube, dyn, factory, gangFactory, informer.FromFactory(factory), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	gangFactory.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- c.Run(ctx, 1) }()

	g := newGang("train", 1, 1, false, "")
	u, err := ToUnstructured(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(tangramv1.GroupVersionResource).Namespace(testNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	phase := func() tangramv1.GangPhase {
		u, err := dyn.Resource(tangramv1.GroupVersionResource).Namespace(testNS).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		got, err := FromObject(u)
		if err != nil {
			return ""
		}
		return got.Status.Phase
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("the PodGroup and a Pending status", func() bool {
		_, err := kube.SchedulingV1beta1().PodGroups(testNS).Get(ctx, "train", metav1.GetOptions{})
		return err == nil && phase() == tangramv1.GangPending
	})
	pod := memberPod(g, "m-0", "node-1", corev1.PodRunning, "")
	pod.Spec.SchedulingGroup.PodGroupName = ptr.To("train")
	if _, err := kube.CoreV1().Pods(testNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Running after the member pod appeared", func() bool { return phase() == tangramv1.GangRunning })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

package usage

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestNodePods: the informer's pods answer Claims, Pod and UID; before
// its first list, Claims fails rather than saying no pod holds a claim.
func TestNodePods(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "trainer", UID: "uid-1"},
		Spec:       corev1.PodSpec{NodeName: "n1", ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: func(s string) *string { return &s }("shared")}}},
	}
	client := fake.NewClientset(pod)
	pods, err := NewNodePods(client, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Claims(context.Background()); err == nil {
		t.Error("Claims before the first list: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods.Start(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for !pods.informer.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("the pod informer did not sync")
		}
		time.Sleep(10 * time.Millisecond)
	}
	claims, err := pods.Claims(ctx)
	if want := map[string][]string{"uid-1": {"team/shared"}}; err != nil || !reflect.DeepEqual(claims, want) {
		t.Errorf("Claims = %v, %v; want %v", claims, err, want)
	}
	if got, ok := pods.Pod("uid-1"); !ok || got.Name != "trainer" {
		t.Errorf("Pod(uid-1) = %v, %t", got, ok)
	}
	if _, ok := pods.Pod("uid-2"); ok {
		t.Error("Pod(uid-2) found")
	}
	if uid, ok := pods.UID("team", "trainer"); !ok || uid != "uid-1" {
		t.Errorf("UID(team/trainer) = %q, %t", uid, ok)
	}
	if _, ok := pods.UID("team", "other"); ok {
		t.Error("UID(team/other) found")
	}
}

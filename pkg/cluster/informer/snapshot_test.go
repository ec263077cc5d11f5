package informer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

func TestListersSnapshot(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	l := FromFactory(factory)
	if l.HasSynced() {
		t.Error("synced before any informer ran")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(factory.Resource().V1().ResourceSlices().Informer().GetIndexer().Add(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}}))
	must(factory.Resource().V1().ResourceClaims().Informer().GetIndexer().Add(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "c1"}}))
	must(factory.Resource().V1().ResourceClaims().Informer().GetIndexer().Add(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "c2"}}))
	must(factory.Resource().V1().DeviceClasses().Informer().GetIndexer().Add(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.tangram.dev"}}))
	must(factory.Core().V1().Nodes().Informer().GetIndexer().Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}))
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Slices) != 1 || len(snap.Claims) != 2 || len(snap.Classes) != 1 || len(snap.Nodes) != 1 {
		t.Errorf("snapshot has %d slices, %d claims (all namespaces), %d classes, %d nodes; want 1, 2, 1, 1",
			len(snap.Slices), len(snap.Claims), len(snap.Classes), len(snap.Nodes))
	}
}

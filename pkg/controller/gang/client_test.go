package gang

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

func TestDynamicGangsList(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	lister := DynamicGangs{Lister: cache.NewGenericLister(indexer, tangramv1.GroupVersionResource.GroupResource())}
	for _, g := range []struct {
		ns, name string
		phase    tangramv1.GangPhase
	}{{"a", "one", tangramv1.GangRunning}, {"b", "two", tangramv1.GangPending}} {
		gang := &tangramv1.GpuGang{}
		gang.Namespace, gang.Name, gang.Status.Phase = g.ns, g.name, g.phase
		u, err := ToUnstructured(gang)
		if err != nil {
			t.Fatal(err)
		}
		if err := indexer.Add(u); err != nil {
			t.Fatal(err)
		}
	}
	gangs, err := lister.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range gangs {
		got = append(got, g.Namespace+"/"+g.Name+"="+string(g.Status.Phase))
	}
	slices.Sort(got)
	if want := []string{"a/one=Running", "b/two=Pending"}; !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}

	// An object that does not decode as a GpuGang fails the list, naming it.
	bad := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "c", "name": "bad"}, "spec": "not an object"}}
	if err := indexer.Add(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := lister.List(); err == nil || !strings.Contains(err.Error(), "c/bad") {
		t.Errorf("List with an undecodable gang: error %v, want one naming c/bad", err)
	}
}

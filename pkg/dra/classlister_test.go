package dra

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClassListerGet(t *testing.T) {
	lister := ClassLister{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu.tangram.dev"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "shared-gpu.tangram.dev"}},
	}
	tests := []struct {
		name         string
		wantNotFound bool
	}{
		{name: "gpu.tangram.dev"},
		{name: "shared-gpu.tangram.dev"},
		{name: "gpu.example.com", wantNotFound: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			class, err := lister.Get(tc.name)
			if tc.wantNotFound {
				// Callers (the allocator, pkg/diagnosis) tell a missing class
				// from other failures the way they would with a real lister.
				if !apierrors.IsNotFound(err) {
					t.Fatalf("Get(%q) error = %v, want NotFound", tc.name, err)
				}
				return
			}
			if err != nil || class.Name != tc.name {
				t.Fatalf("Get(%q) = %v, %v", tc.name, class, err)
			}
		})
	}
	all, err := lister.List()
	if err != nil || len(all) != 2 {
		t.Errorf("List() = %d classes, %v; want 2", len(all), err)
	}
}

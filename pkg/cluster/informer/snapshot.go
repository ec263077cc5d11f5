// Package informer reads a cluster.Snapshot from informer caches, so
// the GpuGang diagnosis and the allocation metrics see the same picture
// without extra API calls.
package informer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tangram-gpu/tangram/pkg/cluster"
)

// Source produces the current cluster picture.
type Source interface {
	Snapshot() (*cluster.Snapshot, error)
}

// Listers is a Source backed by shared informers. Objects are shared with
// the cache: callers must not modify them.
type Listers struct {
	Slices  resourcelisters.ResourceSliceLister
	Claims  resourcelisters.ResourceClaimLister
	Classes resourcelisters.DeviceClassLister
	Nodes   corelisters.NodeLister
	synced  []cache.InformerSynced
}

// FromFactory registers the informers a snapshot needs with the factory.
func FromFactory(f informers.SharedInformerFactory) *Listers {
	slices := f.Resource().V1().ResourceSlices()
	claims := f.Resource().V1().ResourceClaims()
	classes := f.Resource().V1().DeviceClasses()
	nodes := f.Core().V1().Nodes()
	return &Listers{
		Slices:  slices.Lister(),
		Claims:  claims.Lister(),
		Classes: classes.Lister(),
		Nodes:   nodes.Lister(),
		synced: []cache.InformerSynced{
			slices.Informer().HasSynced, claims.Informer().HasSynced,
			classes.Informer().HasSynced, nodes.Informer().HasSynced,
		},
	}
}

// HasSynced is true once every informer has its initial list.
func (l *Listers) HasSynced() bool {
	for _, s := range l.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Snapshot lists everything from the caches.
func (l *Listers) Snapshot() (*cluster.Snapshot, error) {
	snap := &cluster.Snapshot{}
	var err error
	if snap.Slices, err = l.Slices.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("listing ResourceSlices from the cache: %w", err)
	}
	if snap.Claims, err = l.Claims.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("listing ResourceClaims from the cache: %w", err)
	}
	if snap.Classes, err = l.Classes.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("listing DeviceClasses from the cache: %w", err)
	}
	if snap.Nodes, err = l.Nodes.List(labels.Everything()); err != nil {
		return nil, fmt.Errorf("listing Nodes from the cache: %w", err)
	}
	return snap, nil
}

// Package metricsregistry is a Prometheus registry that can list every
// metric registered with it, also a vector that has no series yet, so tests
// can check that a dashboard names only metrics a component exports.
package metricsregistry

import (
	"regexp"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Registry is a prometheus.Registry that remembers its collectors.
type Registry struct {
	*prometheus.Registry

	mu         sync.Mutex
	collectors []prometheus.Collector
}

// New returns an empty Registry.
func New() *Registry {
	return &Registry{Registry: prometheus.NewRegistry()}
}

// Register registers c and remembers it.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers the collectors and panics on the first error,
// like prometheus.Registry.MustRegister.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Describe sends the descriptors of every registered collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	r.mu.Lock()
	collectors := append([]prometheus.Collector(nil), r.collectors...)
	r.mu.Unlock()
	for _, c := range collectors {
		c.Describe(ch)
	}
}

// Desc has no accessor for its name; its String form is stable
// (`Desc{fqName: "name", ...}`) and is what client_golang's own errors print.
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// Names returns the sorted names of every metric the collector describes.
// A histogram or summary is listed once by its family name.
func Names(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	seen := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			seen[m[1]] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

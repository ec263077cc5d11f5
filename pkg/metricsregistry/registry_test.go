package metricsregistry

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestNamesListsVectorsWithoutSeries(t *testing.T) {
	r := New()
	r.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a_total", Help: "h"}, []string{"x"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ns", Subsystem: "sub", Name: "b_seconds", Help: "h"}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "c", Help: "h"}, func() float64 { return 1 }),
	)
	if got, want := Names(r), []string{"a_total", "c", "ns_sub_b_seconds"}; !slices.Equal(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
	// The vector has no series, so Gather does not show it: Describe is what
	// lists it.
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 2 {
		t.Errorf("gathered %d families, want 2 (the unused vector is not gathered)", len(families))
	}
}

func TestRegisterRefusesDuplicatesAndForgetsThem(t *testing.T) {
	r := New()
	g := func() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"}) }
	r.MustRegister(g())
	if err := r.Register(g()); err == nil {
		t.Fatal("registering a second gauge g succeeded")
	}
	if got := Names(r); !slices.Equal(got, []string{"g"}) {
		t.Errorf("Names = %q, want [g]", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustRegister of a duplicate did not panic")
		}
	}()
	r.MustRegister(g())
}
